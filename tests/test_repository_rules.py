"""Triton core's repository rules that the real core confirms in tests/test_triton_core.py, stated one by one
(core model_lifecycle.cc VersionsToLoad, model_repository_manager.cc polling)."""

from __future__ import annotations

import pytest

from customops.triton.repository import read_repository, version_of


@pytest.mark.parametrize(("directory", "version"), [
    ("1", 1), ("0", 0), ("42", 42),
    ("1abc", 1),  # std::stoll reads the leading digits and ignores the rest
    ("+1", 1), ("-1", -1), (" 7", 7),
    ("01", None),  # a leading zero: ignored with a warning
    ("abc", None), ("", None),
    ("warmup", None), ("initial_state", None), ("configs", None),  # never versions
])
def test_a_version_directory_is_read_as_std_stoll_reads_it(directory, version):
    assert version_of(directory) == version


def test_a_version_beyond_int64_aborts_the_server(tmp_path):
    (tmp_path / "m" / "99999999999999999999").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    with pytest.raises(ValueError):
        version_of("99999999999999999999")
    (model,) = read_repository(str(tmp_path))
    assert any(p.code == "CO103" and "std::out_of_range" in p.predicted for p in model.problems)


def test_latest_zero_versions_loads_none(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    config = 'backend: "onnxruntime"\nversion_policy { latest { num_versions: 0 } }\n'
    (tmp_path / "m" / "config.pbtxt").write_text(config)
    (model,) = read_repository(str(tmp_path))
    assert model.versions == () and [p.code for p in model.problems] == ["CO103"]


def test_a_hidden_directory_is_a_model_to_the_core(tmp_path):
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    assert [model.name for model in read_repository(str(tmp_path))] == [".ipynb_checkpoints", "m"]


def test_a_config_name_must_equal_its_directory(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text('name: "other"\nbackend: "onnxruntime"\n')
    (model,) = read_repository(str(tmp_path))
    assert [(p.code, p.predicted) for p in model.problems] == [
        ("CO101", "unexpected directory name 'm' for model 'other', directory name must equal model name")]


def test_a_byte_order_mark_makes_the_config_unreadable_to_protobuf(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_bytes(b'\xef\xbb\xbfbackend: "onnxruntime"\n')
    (model,) = read_repository(str(tmp_path))
    assert [p.code for p in model.problems] == ["CO101"] and "byte-order mark" in model.problems[0].message


def check_json(root, *server):  # type: ignore[no-untyped-def]
    import contextlib
    import io
    import json

    from customops import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["check", "--container-root", str(root), "--format", "json", "--no-cache", "--", "tritonserver",
                  *server])
    return json.loads(out.getvalue())


def test_a_model_name_in_two_repositories_is_polled_from_neither(tree, tmp_path):
    """model_repository_manager.cc: "failed to poll model 'm': not unique across all model repositories", unless
    --model-namespacing. (mini_tritonserver takes one repository, so the oracle cannot show this one.)"""
    for repo in ("a", "b"):
        (tmp_path / repo / "m" / "1").mkdir(parents=True)
        (tmp_path / repo / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    repositories = (f"--model-repository={tmp_path / 'a'}", f"--model-repository={tmp_path / 'b'}")
    report = check_json(tree / "container", *repositories)
    (duplicate,) = [f for f in report["findings"] if f["code"] == "CO110"]
    assert duplicate["predicted"] == "failed to poll model 'm': not unique across all model repositories"
    spaced = check_json(tree / "container", *repositories, "--model-namespacing=true")
    assert "CO110" not in {f["code"] for f in spaced["findings"]}
