"""The TensorFlow op types a model uses, read from the wire format: what CO408 compares with TensorFlow's
registry (the real-framework tests build SavedModels with TensorFlow itself)."""

from __future__ import annotations

import pytest

from customops.errors import InputError
from customops.inspect.protowire import DamagedModel
from customops.inspect.tfmodel import model_ops


def field(number: int, value: bytes) -> bytes:
    assert len(value) < 128
    return bytes([number << 3 | 2, len(value)]) + value


def node(op: str, name: str = "n") -> bytes:
    return field(1, name.encode()) + field(2, op.encode())  # NodeDef.name, NodeDef.op


def graph() -> bytes:
    function = field(1, field(1, b"my_function")) + field(3, node("Inner"))  # signature.name, node_def
    return (field(1, node("Placeholder")) + field(1, node("Custom>Op")) + field(1, node("my_function"))
            + field(2, field(1, function)))  # GraphDef.node, GraphDef.library.function


def test_a_graphdef_uses_its_nodes_ops_and_its_functions_ops_but_not_the_functions(tmp_path):
    path = tmp_path / "model.graphdef"
    path.write_bytes(graph())
    assert model_ops(str(path)) == {"Placeholder", "Custom>Op", "Inner"}


def test_a_savedmodel_uses_its_stripped_op_list_and_its_graph(tmp_path):
    op_list = field(1, field(1, b"Listed"))  # OpList.op.name
    meta_graph = field(1, field(2, op_list)) + field(2, graph())  # meta_info_def.stripped_op_list, graph_def
    (tmp_path / "model.savedmodel").mkdir()
    (tmp_path / "model.savedmodel" / "saved_model.pb").write_bytes(field(2, meta_graph))
    assert model_ops(str(tmp_path / "model.savedmodel")) == {"Listed", "Placeholder", "Custom>Op", "Inner"}


def test_a_damaged_or_missing_model_is_an_error_not_a_guess(tmp_path):
    path = tmp_path / "model.graphdef"
    path.write_bytes(graph()[:-3])
    with pytest.raises(DamagedModel):
        model_ops(str(path))
    (tmp_path / "empty.savedmodel").mkdir()
    with pytest.raises(InputError, match=r"saved_model\.pb: No such file"):
        model_ops(str(tmp_path / "empty.savedmodel"))
