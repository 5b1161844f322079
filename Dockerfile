# A Triton Inference Server image whose entrypoint checks the model repository's custom libraries, then
# execs tritonserver with the LD_PRELOAD, LD_LIBRARY_PATH and --backend-config they need. Build it from a
# customops checkout (the commit you pin is the checkout's; .dockerignore keeps all but the sources out of
# the build context):
#
#   docker build --build-arg TRITON_RELEASE=24.12 -t triton-customops .
#   docker run --rm --gpus all --shm-size=1g -p 8000-8002:8000-8002 -v "$PWD/models:/models" \
#       triton-customops --model-repository=/models
#
# Arguments after the image name go to tritonserver. NVIDIA's entrypoint stays first: it sets up the
# environment Triton and its scripts expect (and prints the banner), then execs customops, which execs the
# server, so the server keeps PID 1. The container profile for CI: docs/ci.md.
# The base image is pinned by its release tag (YY.MM); --build-arg TRITON_RELEASE picks another one.
ARG TRITON_RELEASE=24.12
FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3

# customops lives in its own virtual environment: the system Python is the Python backend's (Triton pins
# its packages there, numpy<2 among them) and customops' dependencies must not change it. `python3 -m venv`
# needs ensurepip, which Ubuntu ships in python3-venv (a no-op where the image has it). Not pinned: its
# version must be the one matching the image's python3, which differs between releases (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml README.md LICENSE constraints.txt /opt/customops/src/
COPY customops /opt/customops/src/customops
# The install docs/ci.md documents: the checkout's wheel (pip fetches the build requirement, setuptools>=77,
# from the package index), with the dependency versions constraints.txt pins. Only the `customops` command
# goes on PATH (a symbolic link), not the virtual environment's bin directory: its python3 would shadow the
# system one for the server and its backends.
RUN python3 -m venv /opt/customops/venv \
    && /opt/customops/venv/bin/python -m pip wheel --no-cache-dir --no-deps -w /tmp/customops-dist /opt/customops/src \
    && /opt/customops/venv/bin/python -m pip install --no-cache-dir -c /opt/customops/src/constraints.txt \
        /tmp/customops-dist/customops-*.whl \
    && rm -rf /tmp/customops-dist \
    && ln -s /opt/customops/venv/bin/customops /usr/local/bin/customops \
    && customops --version

ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh", "customops", "launch", "--", "tritonserver"]
CMD ["--model-repository=/models"]
