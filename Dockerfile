# A Triton Inference Server image whose entrypoint checks the model repository's custom libraries, then
# execs tritonserver with the LD_PRELOAD, LD_LIBRARY_PATH and --backend-config they need:
#
#   docker build --build-arg TRITON_RELEASE=24.12 -t triton-customops .
#   docker run --rm -v "$PWD/models:/models" triton-customops --model-repository=/models
#
# Arguments after the image name go to tritonserver. The server keeps PID 1 (customops execs it).
ARG TRITON_RELEASE=24.12
FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3

COPY pyproject.toml README.md /opt/customops/
COPY customops /opt/customops/customops
# Ubuntu 24.04 images mark the system Python as externally managed; older pips ignore this variable.
ENV PIP_BREAK_SYSTEM_PACKAGES=1
RUN python3 -m pip install --no-cache-dir /opt/customops

ENTRYPOINT ["customops", "launch", "--", "tritonserver"]
CMD ["--model-repository=/models"]
