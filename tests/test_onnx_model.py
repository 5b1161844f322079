"""The ONNX reader (customops/inspect/onnxmodel.py) against models written by the onnx package itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from customops.inspect.onnxmodel import model_ops

onnx = pytest.importorskip("onnx")
helper = onnx.helper
FLOAT = onnx.TensorProto.FLOAT


def io(name: str):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, FLOAT, [2])


def save(tmp_path, graph, functions=()):  # type: ignore[no-untyped-def]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("x.y", 1)],
                              functions=list(functions))
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_ops_inside_subgraphs_are_found(tmp_path):
    then = helper.make_graph([helper.make_node("Inner", ["x"], ["y"], domain="x.y")], "then", [], [io("y")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "else", [], [io("y")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []), io("x")],
                              [io("y")])
    used, local = model_ops(save(tmp_path, graph))
    assert used == {("", "If"), ("x.y", "Inner"), ("", "Identity")} and local == set()


def test_model_local_functions_are_reported_as_defined_by_the_model(tmp_path):
    function = helper.make_function("x.y", "Double", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                    [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Double", ["x"], ["y"], domain="x.y")], "g", [io("x")], [io("y")])
    used, local = model_ops(save(tmp_path, graph, [function]))
    assert ("x.y", "Double") in used and local == {("x.y", "Double")} and ("", "Add") in used


def test_a_damaged_model_is_a_value_error_never_another_exception(tmp_path):
    graph = helper.make_graph([helper.make_node("Op", ["x"], ["y"], domain="x.y")], "g", [io("x")], [io("y")])
    data = Path(save(tmp_path, graph)).read_bytes()
    damaged = tmp_path / "damaged.onnx"
    refused = 0
    for cut in range(1, len(data)):
        damaged.write_bytes(data[:cut] + b"\xff" * 3)  # truncated, then junk (sometimes still well-formed)
        try:
            used, local = model_ops(str(damaged))
        except ValueError:
            refused += 1
            continue
        assert isinstance(used, set) and isinstance(local, set)
    assert refused > (len(data) - 1) * 0.9
