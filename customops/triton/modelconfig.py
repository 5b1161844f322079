"""config.pbtxt parsed as protobuf text format against Triton's real ModelConfig schema.

The schema is the protoc output of triton-inference-server/common `model_config.proto` that the
tritonclient package ships (tritonclient/grpc/model_config_pb2.py). It is loaded by file path, so that
importing it does not import tritonclient.grpc (which needs grpc and numpy).
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from customops.errors import CustomopsError

UNKNOWN_FIELD = re.compile(r'Message type "(?P<type>[\w.]+)" has no field named "(?P<name>[^"]+)"')
UNKNOWN_ENUM = re.compile(r'Enum type "(?P<type>[\w.]+)" has no value named (?P<name>\w+)')


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
        return None, ConfigError(path, exc.GetLine(), exc.GetColumn(), _with_suggestion(reason))
    return config, None


def did_you_mean(word: str, choices) -> str:
    """"did you mean 'x'?" for the closest of `choices` to a misspelled `word`, or "" when none is close."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.75)
    return f"did you mean '{close[0]}'?" if close else ""


def _with_suggestion(reason: str) -> str:
    suggestion = _suggestion(reason)
    return f"{reason.rstrip('.')}; {suggestion}" if suggestion else reason


def _suggestion(reason: str) -> str:
    """For an unknown field or enum value: the closest name the schema has at that point."""
    pool = schema().DESCRIPTOR.pool
    field = UNKNOWN_FIELD.search(reason)
    if field:
        try:
            message_type = pool.FindMessageTypeByName(field.group("type"))
        except KeyError:
            return ""
        return did_you_mean(field.group("name"), message_type.fields_by_name)
    enum = UNKNOWN_ENUM.search(reason)
    if enum:
        try:
            enum_type = pool.FindEnumTypeByName(enum.group("type"))
        except KeyError:
            return ""
        return did_you_mean(enum.group("name"), enum_type.values_by_name)
    return ""
