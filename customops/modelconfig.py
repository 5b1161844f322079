"""config.pbtxt parsed as protobuf text format against Triton's real ModelConfig schema.

The schema is the protoc output of triton-inference-server/common `model_config.proto` that the
tritonclient package ships (tritonclient/grpc/model_config_pb2.py). It is loaded by file path, so that
importing it does not import tritonclient.grpc (which needs grpc and numpy).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from customops.errors import CustomopsError


@dataclass(frozen=True)
class ConfigError:
    path: str
    line: int | None
    column: int | None
    reason: str


@cache
def schema() -> ModuleType:
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise CustomopsError("the tritonclient package (Triton's model_config schema) is not installed")
    path = next(iter(spec.submodule_search_locations)) + "/grpc/model_config_pb2.py"
    loader_spec = importlib.util.spec_from_file_location("customops_model_config_pb2", path)
    if loader_spec is None or loader_spec.loader is None:
        raise CustomopsError(f"{path}: cannot load Triton's model_config schema")
    module = importlib.util.module_from_spec(loader_spec)
    loader_spec.loader.exec_module(module)
    return module


def parse_config(text: str, path: str) -> tuple[Any | None, ConfigError | None]:
    """The ModelConfig message, or where and why the text does not parse."""
    from google.protobuf import text_format

    config = schema().ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        message = str(exc)
        reason = message.split(" : ", 1)[1] if " : " in message else message
        return None, ConfigError(path, exc.GetLine(), exc.GetColumn(), reason)
    return config, None
