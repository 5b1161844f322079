"""Triton's ModelConfig schema ships with customops (customops/data/model_config.json, a FileDescriptorProto made
by scripts/generate_model_config.py from triton-inference-server/common's model_config.proto) and is built at run
time in a private descriptor pool: no other package supplies it, and no other copy of inference.ModelConfig in the
process (an older client's generated model_config_pb2) clashes with it."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool

from customops.triton.modelconfig import parse_config, schema

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "customops" / "data" / "model_config.json"
GENERATOR = ROOT / "scripts" / "generate_model_config.py"
CACHED_SOURCES = Path.home() / ".cache" / "customops-oracles" / "triton" / "src"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_model_config", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shipped() -> dict:
    return json.loads(SHIPPED.read_text())


def _shipped_descriptor() -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(_shipped()["file_descriptor_proto"]))


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_shipped_descriptor_is_what_the_generator_makes_from_the_shared_sources():
    generator = _generator()
    sources = [s for s in (generator.DEFAULT_SOURCE, CACHED_SOURCES) if s.exists()]
    if not sources:
        pytest.skip(f"no Triton sources here ({generator.DEFAULT_SOURCE}, {CACHED_SOURCES})")
    try:
        protoc = generator.protoc_command()
    except generator.GenerateError as exc:
        pytest.skip(str(exc))
    made = generator.generate(sources[0], protoc=" ".join(protoc))
    assert made == SHIPPED.read_text(), "regenerate with scripts/generate_model_config.py"


def test_the_shipped_descriptor_records_its_source():
    source = _shipped()["source"]
    assert source["repository"] == "https://github.com/triton-inference-server/common"
    assert source["path"] == "protobuf/model_config.proto"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    proto = CACHED_SOURCES / "common" / source["path"]
    if proto.is_file():  # the .proto the recorded hash names
        assert hashlib.sha256(proto.read_bytes()).hexdigest() == source["sha256"]
    heads = CACHED_SOURCES / "HEADS.txt"
    if heads.is_file():
        assert f"common {source['commit']}" in heads.read_text().splitlines()
    descriptor = _shipped_descriptor()
    assert (descriptor.name, descriptor.package, descriptor.syntax) == ("model_config.proto", "inference", "proto3")
    assert not descriptor.dependency and not descriptor.HasField("source_code_info")  # only what the runtime reads
    assert SHIPPED.stat().st_size < 32 * 1024


def test_the_schema_is_the_shipped_one_in_a_private_pool():
    loaded = schema()
    assert loaded.pool is not descriptor_pool.Default()
    file = loaded.pool.FindFileByName("model_config.proto")
    assert descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb) == _shipped_descriptor()
    assert loaded.model_config.DESCRIPTOR.file.pool is loaded.pool
    assert loaded.model_config.DESCRIPTOR.full_name == "inference.ModelConfig"
    assert loaded.source == _shipped()["source"]


def test_loading_the_schema_imports_only_protobuf_customops_and_the_standard_library():
    out = _run("""
        import sys
        before = set(sys.modules)
        from customops.triton.modelconfig import parse_config
        config, error = parse_config('name: "m"\\nbackend: "python"\\nruntime: "model.py"', "config.pbtxt")
        assert error is None and config.runtime == "model.py", error
        from google.protobuf import descriptor_pool
        try:
            descriptor_pool.Default().FindMessageTypeByName("inference.ModelConfig")
        except KeyError:
            print("default pool: no inference.ModelConfig")
        for name in sorted(set(sys.modules) - before):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ("customops", "google"):
                print("imported", name)
    """)
    assert out.splitlines() == ["default pool: no inference.ModelConfig"]


def test_another_copy_of_model_config_in_the_default_pool_does_not_clash():
    # an older release's schema (as an old client's generated model_config_pb2 registers it): no runtime field
    older = _shipped_descriptor()
    model_config = next(m for m in older.message_type if m.name == "ModelConfig")
    runtime = next(i for i, f in enumerate(model_config.field) if f.name == "runtime")
    del model_config.field[runtime]
    blob = base64.b64encode(older.SerializeToString()).decode()
    for first in ("theirs", "ours"):
        out = _run(f"""
            import base64
            from google.protobuf import descriptor_pool, message_factory, text_format
            from customops.triton.modelconfig import parse_config, schema

            def theirs():
                pool = descriptor_pool.Default()
                pool.AddSerializedFile(base64.b64decode("{blob}"))
                return message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))

            if "{first}" == "ours":
                schema()
            Theirs = theirs()
            config, error = parse_config('backend: "python"\\nruntime: "model.py"', "config.pbtxt")
            assert error is None and config.runtime == "model.py", error
            assert type(config) is not Theirs
            try:
                text_format.Parse('runtime: "model.py"', Theirs())
            except text_format.ParseError as exc:
                print("theirs:", str(exc).split(" : ", 1)[-1])
        """)
        assert out.strip() == 'theirs: Message type "inference.ModelConfig" has no field named "runtime".', first


def test_a_field_newer_than_old_clients_parses():
    # runtime (Triton 24.01; the clients of 2.40 and 2.41 lack it), and newer messages beside it
    config, error = parse_config(textwrap.dedent("""\
        name: "m"
        backend: "python"
        runtime: "model.py"
        max_batch_size: 8
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUT" data_type: TYPE_BF16 dims: [ 4 ] } ]
        instance_group [ { kind: KIND_CPU count: 2 } ]
        """), "config.pbtxt")
    assert error is None, error
    assert config.runtime == "model.py"
    assert config.output[0].data_type == schema().pool.FindEnumTypeByName("inference.DataType").values_by_name[
        "TYPE_BF16"].number


NESTED = """
name: "m" backend: "python" runtime: "model.py" max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] reshape { shape: [ 1 ] } } ]
output [ { name: "OUT" data_type: TYPE_BF16 dims: [ 4 ] } ]
instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] secondary_devices [ { kind: KIND_NVDLA } ] } ]
dynamic_batching { preferred_batch_size: [ 4 ] priority_levels: 2 default_priority_level: 1
  priority_queue_policy { key: 1 value { timeout_action: DELAY max_queue_size: 3 } } }
parameters { key: "k" value { string_value: "v" } }
optimization { cuda { graphs: true graph_spec [ { batch_size: 1 input { key: "IN" value { dim: [ 1 ] } } } ] }
  execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" parameters { key: "a" value: "b" } } ] } }
model_warmup [ { name: "w" batch_size: 1
  inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]
"""


def test_nested_messages_parse_after_a_garbage_collection():
    # protobuf 4.22-4.24's upb runtime crashed here when only ModelConfig's class was held (a segfault: run apart)
    out = _run(f"""
        import gc
        from customops.triton.modelconfig import parse_config, schema
        schema()
        gc.collect()
        for _ in range(3):
            config, error = parse_config({NESTED!r}, "config.pbtxt")
            gc.collect()
            assert error is None, error
        print(config.dynamic_batching.priority_queue_policy[1].max_queue_size, config.model_warmup[0].inputs["IN"].dims)
    """)
    assert out.split() == ["3", "[1]"]


def test_the_core_s_text_format_rules_hold():
    _, error = parse_config('name: "m"\nbakend: "python"\n', "config.pbtxt")
    assert error is not None and (error.line, error.column) == (2, 1)
    assert error.reason == 'Message type "inference.ModelConfig" has no field named "bakend"; did you mean \'backend\'?'
    _, error = parse_config('input { name: "x" data_type: TYPE_FP33 }', "config.pbtxt")
    assert error is not None
    assert error.reason.endswith('Enum type "inference.DataType" has no value named TYPE_FP33; did you mean '
                                 "'TYPE_FP32'?")
    _, error = parse_config('\ufeffname: "m"', "config.pbtxt")  # protobuf's text parser takes no byte-order mark
    assert error is not None and (error.line, error.column) == (1, 1)
    _, error = parse_config('name: "m"\nname: "n"', "config.pbtxt")  # a singular field given twice
    assert error is not None and error.line == 2


def test_the_generator_refuses_a_source_without_a_commit(tmp_path):
    generator = _generator()
    proto = tmp_path / "model_config.proto"
    proto.write_text('syntax = "proto3";\npackage inference;\nmessage ModelConfig { string name = 1; }\n')
    with pytest.raises(generator.GenerateError, match="--commit"):
        generator.read_source(proto)
    assert generator.read_source(proto, "0" * 40) == (proto.read_bytes(), "0" * 40)
    if shutil.which("protoc") is None:
        pytest.skip("no protoc on PATH")
    doc = json.loads(generator.generate(proto, "0" * 40))
    made = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(doc["file_descriptor_proto"]))
    assert [m.name for m in made.message_type] == ["ModelConfig"]
