"""The operator domains and types an ONNX model uses, read from the protobuf wire format directly (no onnx
package): ModelProto.graph (7) and functions (25), GraphProto.node (1), NodeProto.op_type (4) and
domain (7), subgraphs in AttributeProto.g (6) and graphs (11), FunctionProto.name (1), node (7) and domain (10).
Weights are skipped, never copied, so multi-GB models cost what their graph costs."""

from __future__ import annotations

from customops import safeio
from customops.inspect.protowire import DamagedModel, fields, text

MAX_DEPTH = 64  # subgraph nesting; deeper input is treated as damaged


def _graph_ops(graph: memoryview, depth: int, out: set[tuple[str, str]]) -> None:
    if depth > MAX_DEPTH:
        raise DamagedModel("subgraphs nested too deeply")
    for number, value in fields(graph):
        if number == 1 and isinstance(value, memoryview):
            _node_ops(value, depth, out)


def _node_ops(node: memoryview, depth: int, out: set[tuple[str, str]]) -> None:
    op_type = domain = ""
    for number, value in fields(node):
        if number == 4:
            op_type = text(value)
        elif number == 7:
            domain = text(value)
        elif number == 5 and isinstance(value, memoryview):  # AttributeProto: subgraphs of If/Loop/Scan
            for attr_number, attr_value in fields(value):
                if attr_number in (6, 11) and isinstance(attr_value, memoryview):
                    _graph_ops(attr_value, depth + 1, out)
    out.add((domain, op_type))


def model_ops(path: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """((domain, op_type) of every node, (domain, name) of every model-local function). Raises InputError
    or DamagedModel."""
    used: set[tuple[str, str]] = set()
    local: set[tuple[str, str]] = set()
    data = safeio.map_regular(path, safeio.MODEL_FILE_LIMIT)  # closed when the last view of it goes
    view = memoryview(data)
    for number, value in fields(view):
        if number == 7 and isinstance(value, memoryview):
            _graph_ops(value, 0, used)
        elif number == 25 and isinstance(value, memoryview):
            name = domain = ""
            for f_number, f_value in fields(value):
                if f_number == 1:
                    name = text(f_value)
                elif f_number == 10:
                    domain = text(f_value)
                elif f_number == 7 and isinstance(f_value, memoryview):
                    _node_ops(f_value, 1, used)
            local.add((domain, name))
    return used, local
