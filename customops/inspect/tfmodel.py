"""The TensorFlow op types a model uses, read from the protobuf wire format (no tensorflow import).

SavedModel (saved_model.pb): every MetaGraphDef (2): MetaInfoDef (1).stripped_op_list (2).op (1).name (1),
and the graph. GraphDef: node (1).op (2), and library (2).function (1): node_def (3).op (2); a node may
call a library function by name (signature (1).name (1)), which is not an op."""

from __future__ import annotations

import os

from customops import safeio
from customops.inspect.protowire import fields, text


def model_ops(path: str) -> set[str]:
    """Op types used by the SavedModel directory or GraphDef file at `path`. Raises InputError or
    DamagedModel."""
    saved_model = os.path.isdir(path)
    data = safeio.map_regular(os.path.join(path, "saved_model.pb") if saved_model else path,
                              safeio.MODEL_FILE_LIMIT)  # closed when the last view of it goes
    used: set[str] = set()
    functions: set[str] = set()
    view = memoryview(data)
    if not saved_model:
        _graph_ops(view, used, functions)
        return used - functions
    for number, meta_graph in fields(view):
        if number != 2 or not isinstance(meta_graph, memoryview):
            continue
        for meta_number, value in fields(meta_graph):
            if meta_number == 1 and isinstance(value, memoryview):
                for info_number, op_list in fields(value):
                    if info_number == 2 and isinstance(op_list, memoryview):
                        used.update(_name(op) for n, op in fields(op_list) if n == 1 and isinstance(op, memoryview))
            elif meta_number == 2 and isinstance(value, memoryview):
                _graph_ops(value, used, functions)
    return used - functions


def _graph_ops(graph: memoryview, used: set[str], functions: set[str]) -> None:
    for number, value in fields(graph):
        if number == 1 and isinstance(value, memoryview):
            used.update(text(op) for n, op in fields(value) if n == 2)
        elif number == 2 and isinstance(value, memoryview):
            for lib_number, function in fields(value):
                if lib_number != 1 or not isinstance(function, memoryview):
                    continue
                for f_number, f_value in fields(function):
                    if f_number == 1 and isinstance(f_value, memoryview):
                        functions.add(_name(f_value))
                    elif f_number == 3 and isinstance(f_value, memoryview):
                        used.update(text(op) for n, op in fields(f_value) if n == 2)


def _name(op_def: memoryview) -> str:
    return next((text(v) for n, v in fields(op_def) if n == 1), "")
