#!/usr/bin/env python3
"""Regenerate customops/data/model_config.json: Triton's ModelConfig schema as a serialized FileDescriptorProto.

The schema is triton-inference-server/common's protobuf/model_config.proto, compiled by protoc (no source info,
so the descriptor holds only what the runtime needs). customops/triton/modelconfig.py builds the message classes
from it at run time in a private descriptor pool, so customops needs only the protobuf runtime, not Triton's Python
client.

    scripts/generate_model_config.py [--source SRC] [--commit SHA] [--output FILE] [--protoc CMD] [--check]

SRC is one of: the shared sources' tarball (triton-src.tar.xz: common/protobuf/model_config.proto, and HEADS.txt
for the commit), a directory laid out like it (an extracted tarball: HEADS.txt, common/...), a checkout of the
`common` repository (protobuf/model_config.proto; its commit from git), or the .proto file itself (then give
--commit). The default is $CUSTOMOPS_TRITON_SOURCES/triton-src.tar.xz (/work/shared/oracles/triton).

protoc is `protoc` on PATH (Debian's protobuf-compiler) or else `python -m grpc_tools.protoc` (pip's grpcio-tools,
installed only for generating: it is not a dependency of customops). --check writes nothing and exits 1 when the
shipped file differs from what it would write.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "customops" / "data" / "model_config.json"
SHARED = Path(os.environ.get("CUSTOMOPS_TRITON_SOURCES", "/work/shared/oracles/triton"))
DEFAULT_SOURCE = SHARED / "triton-src.tar.xz"
REPOSITORY = "https://github.com/triton-inference-server/common"
PROTO_PATH = "protobuf/model_config.proto"  # inside the common repository
PROTO_NAME = "model_config.proto"  # the descriptor's file name, as Triton's generated model_config_pb2 has it
PACKAGE = "inference"


class GenerateError(Exception):
    pass


def _heads_commit(text: str) -> str | None:
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "common":
            return words[1]
    return None


def read_source(source: Path, commit: str | None = None) -> tuple[bytes, str]:
    """(model_config.proto's bytes, the common repository's commit) from any of the sources the script takes."""
    if source.is_file() and source.name.endswith((".tar.xz", ".tar.gz", ".tar", ".tgz")):
        with tarfile.open(source) as tar:
            members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}

            def read(name: str) -> bytes:
                member = members.get(name)
                extracted = tar.extractfile(member) if member else None
                if extracted is None:
                    raise GenerateError(f"{source}: no {name}")
                return extracted.read()

            proto = read(f"common/{PROTO_PATH}")
            found = commit or _heads_commit(read("HEADS.txt").decode())
    elif source.is_dir() and (source / "common" / PROTO_PATH).is_file():
        proto = (source / "common" / PROTO_PATH).read_bytes()
        heads = source / "HEADS.txt"
        found = commit or (_heads_commit(heads.read_text()) if heads.is_file() else None)
    elif source.is_dir() and (source / PROTO_PATH).is_file():
        proto = (source / PROTO_PATH).read_bytes()
        found = commit
        if found is None:
            done = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True)
            found = done.stdout.strip() if done.returncode == 0 else None
    elif source.is_file():
        proto = source.read_bytes()
        found = commit
    else:
        raise GenerateError(f"{source}: not a Triton source tarball, source directory, common checkout or .proto")
    if not found:
        raise GenerateError(f"{source}: cannot tell the common repository's commit; give --commit")
    return proto, found


def protoc_command(protoc: str | None = None) -> list[str]:
    """The protoc to run: the one asked for, `protoc` on PATH, or grpcio-tools' module."""
    if protoc:
        return protoc.split()
    found = shutil.which("protoc")
    if found:
        return [found]
    done = subprocess.run([sys.executable, "-c", "import grpc_tools.protoc"], capture_output=True)
    if done.returncode == 0:
        return [sys.executable, "-m", "grpc_tools.protoc"]
    raise GenerateError("no protoc: install Debian's protobuf-compiler, or grpcio-tools into the venv "
                        "(.venv/bin/pip install grpcio-tools; only for generating)")


def compile_descriptor(proto: bytes, protoc: list[str]) -> bytes:
    """The serialized FileDescriptorProto protoc makes of model_config.proto (no source info, no imports)."""
    from google.protobuf import descriptor_pb2

    with tempfile.TemporaryDirectory(prefix="customops-protoc-") as tmp:
        (Path(tmp) / PROTO_NAME).write_bytes(proto)
        out = Path(tmp) / "set.binpb"
        done = subprocess.run([*protoc, f"--proto_path={tmp}", f"--descriptor_set_out={out}", PROTO_NAME],
                              cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            raise GenerateError(f"{' '.join(protoc)} failed ({done.returncode}):\n{done.stderr.strip()}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    if len(files) != 1 or files[0].name != PROTO_NAME or files[0].package != PACKAGE:
        raise GenerateError(f"protoc made {[f.name for f in files]}, not one {PROTO_NAME} of package {PACKAGE}")
    return files[0].SerializeToString(deterministic=True)


def document(proto: bytes, commit: str, descriptor: bytes) -> dict:
    """The JSON customops ships: where the schema came from, and the descriptor."""
    return {
        "about": "Triton's ModelConfig schema (package inference) as a serialized FileDescriptorProto, base64; "
                 "generated by scripts/generate_model_config.py, read by customops/triton/modelconfig.py",
        "source": {"repository": REPOSITORY, "path": PROTO_PATH, "commit": commit,
                   "sha256": hashlib.sha256(proto).hexdigest()},
        "file_descriptor_proto": base64.b64encode(descriptor).decode("ascii"),
    }


def render(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def generate(source: Path = DEFAULT_SOURCE, commit: str | None = None, protoc: str | None = None) -> str:
    """The text of customops/data/model_config.json made from `source`."""
    proto, found = read_source(source, commit)
    return render(document(proto, found, compile_descriptor(proto, protoc_command(protoc))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--commit", help="the common repository's commit (when the source cannot tell)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--protoc", help="the protoc command (default: protoc on PATH, else grpc_tools.protoc)")
    parser.add_argument("--check", action="store_true", help="exit 1 when --output differs; write nothing")
    args = parser.parse_args(argv)
    try:
        text = generate(args.source, args.commit, args.protoc)
    except (GenerateError, OSError, tarfile.TarError) as exc:
        print(f"generate_model_config: {exc}", file=sys.stderr)
        return 2
    if args.check:
        same = args.output.is_file() and args.output.read_text() == text
        print(f"{args.output}: {'up to date' if same else 'differs from what the generator makes'}")
        return 0 if same else 1
    args.output.write_text(text)
    print(f"{args.output}: {len(text)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
