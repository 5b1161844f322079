"""Can we upgrade? (issue #32): `check --triton-release A..B` checks every model against every release in one run,
from the releases' cited facts (tests/test_releases.py holds them to their sources): a table of models by
releases, each cell `ok`, the codes that fail there, or `?` where the release's facts cannot decide; the findings
that differ between releases once each, with the releases they occur in; and the newest release where everything
loads. What a release's facts decide here: a CUDA runtime of another major (25.08 moved to CUDA 13), symbol
versions beyond the release's glibc and libstdc++ (24.11 moved to Ubuntu 24.04), the TensorFlow backend's removal
(25.03)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def gcc(out: Path, source: str, *flags: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True, capture_output=True)
    return out


def onnxruntime_model(repo: Path, name: str, library: Path) -> None:
    """A model whose op library is `library` (at /models/NAME/ops/ when mounted)."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "ops").mkdir()
    (repo / name / "ops" / library.name).write_bytes(library.read_bytes())
    (repo / name / "config.pbtxt").write_text(
        f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "/models/{name}/ops/{library.name}" }}\n')


OP = "void *RegisterCustomOps(void *o, const void *a) { (void)o; (void)a; return 0; }\n"


def needing(work: Path, name: str, soname: str, node: str | None = None, entry: bool = True) -> Path:
    """An op library `name` (with ONNX Runtime's entry point unless `entry` is False) that needs a stand-in for
    `soname` and its function `provided`, under the version node `node` where one is given."""
    provider = work / soname.replace("+", "x")
    provider.mkdir()
    flags = [f"-Wl,-soname,{soname}"]
    if node:
        (provider / "v.map").write_text(f"{node} {{ global: *; }};\n")
        flags.append(f"-Wl,--version-script={provider / 'v.map'}")
    gcc(provider / soname, "int provided(void) { return 1; }\n", *flags)
    return gcc(work / name, "extern int provided(void);\nint (*const uses)(void) = provided;\n" + (OP if entry else ""),
               f"-L{provider}", f"-l:{soname}", "-Wl,--no-as-needed")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`cuda_op` links libcudart.so.12; `new_cxx_op` needs GLIBCXX_3.4.32 (libstdc++ of GCC 13.2, Ubuntu 24.04's);
    `ort_121_op` needs ONNX Runtime 1.21.0's version node; `torch_op` links libtorch_cpu.so; `tf` is a TensorFlow
    model."""
    work = tmp_path_factory.mktemp("libs")
    cuda = needing(work, "libcuda_op.so", "libcudart.so.12")
    cxx = needing(work, "libnew_cxx_op.so", "libstdc++.so.6", "GLIBCXX_3.4.32")
    ort_op = needing(work, "libort_121_op.so", "libonnxruntime.so.1", "VERS_1.21.0")
    torch_op = needing(work, "libtorch_op.so", "libtorch_cpu.so", entry=False)
    repo = tmp_path_factory.mktemp("repo") / "models"
    onnxruntime_model(repo, "cuda_op", cuda)
    onnxruntime_model(repo, "new_cxx_op", cxx)
    onnxruntime_model(repo, "ort_121_op", ort_op)
    onnxruntime_model(repo, "torch_op", torch_op)
    (repo / "tf" / "1").mkdir(parents=True)
    (repo / "tf" / "1" / "model.graphdef").write_bytes(b"")
    (repo / "tf" / "config.pbtxt").write_text('backend: "tensorflow"\n')
    return repo


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "customops", "check", *args, "--no-cache"], capture_output=True,
                          text=True, cwd=cwd, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def matrix(repository: Path, releases: str, tmp_path: Path, *more: str) -> dict:
    out = check(str(repository), "--triton-release", releases, "--format", "json", *more, cwd=tmp_path)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def test_a_plugin_on_cuda_12_loads_until_the_release_that_moved_to_cuda_13(repository, tmp_path):
    """25.08 is the first release on CUDA 13 (its release notes); 25.07 and 25.09's notes state no CUDA, so the
    matrix cannot say the plugin loads there: `?`, and they do not count as passing."""
    report = matrix(repository, "25.06..25.10", tmp_path, "--load-model", "cuda_op")
    (model,) = report["models"]
    assert model["failing"] == {"25.06": [], "25.07": [], "25.08": ["CO502"], "25.09": [], "25.10": ["CO502"]}
    assert set(model["undecided"]) == {"25.07", "25.09"} and model["undecided"]["25.07"] == ["libcudart.so.12: CUDA"]
    assert report["newest_passing"] == "25.06" and not report["ok"]
    co502 = [f for f in report["findings"] if f["code"] == "CO502"]
    assert [f["targets"] for f in co502] == [["25.08"], ["25.10"]]  # their messages name each release's CUDA
    assert "CUDA 13.0.0.044" in co502[0]["message"]


def test_a_library_needing_gcc_13s_libstdcxx_loads_from_the_move_to_ubuntu_24_04(repository, tmp_path):
    report = matrix(repository, "24.10,24.11", tmp_path, "--load-model", "new_cxx_op")
    (model,) = report["models"]
    assert model["failing"] == {"24.10": ["CO306"], "24.11": []} and report["newest_passing"] == "24.11"
    (finding,) = [f for f in report["findings"] if f["code"] == "CO306"]
    assert finding["targets"] == ["24.10"] and "GLIBCXX_3.4.30" in finding["message"]


def test_a_tensorflow_model_fails_from_the_release_that_dropped_the_backend(repository, tmp_path):
    report = matrix(repository, "25.01..25.04", tmp_path, "--load-model", "tf")
    assert report["models"][0]["failing"] == {"25.01": [], "25.02": [], "25.03": ["CO203"], "25.04": ["CO203"]}
    (finding,) = [f for f in report["findings"] if f["code"] == "CO203"]
    assert finding["targets"] == ["25.03", "25.04"]  # one finding, both releases: not the same finding twice
    assert report["newest_passing"] == "25.02"


def test_the_text_table_shows_each_model_by_release_and_names_the_newest_that_loads(repository, tmp_path):
    out = check(str(repository), "--triton-release", "25.02,25.06,25.08", "--load-model", "cuda_op", "--load-model",
                "new_cxx_op", "--load-model", "tf", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()
            if line.split()[:1] and line.split()[0] in ("model", "cuda_op", "new_cxx_op", "tf")}
    assert rows["model"] == ["25.02", "25.06", "25.08"]
    assert rows["cuda_op"] == ["ok", "ok", "CO502"] and rows["tf"] == ["ok", "CO203", "CO203"]
    assert out.stdout.rstrip().splitlines()[-1] == ("Newest release where everything loads, as far as its facts "
                                                     "tell: 25.02")


def test_the_exit_status_is_the_worst_releases_unless_fail_on_target_picks_one(repository, tmp_path):
    assert check(str(repository), "--triton-release", "25.02,25.06", "--load-model", "tf", cwd=tmp_path).returncode == 1
    assert check(str(repository), "--triton-release", "25.02,25.06", "--load-model", "tf", "--fail-on-target",
                 "25.02", cwd=tmp_path).returncode == 0
    wrong = check(str(repository), "--triton-release", "25.02,25.06", "--fail-on-target", "24.01", cwd=tmp_path)
    assert wrong.returncode == 2 and "not one of the targets checked (25.02, 25.06)" in wrong.stderr


def test_latest_is_one_release_checked_as_any_other(repository, tmp_path):
    newest = matrix(repository, "latest", tmp_path, "--load-model", "tf")
    assert newest["schema"] == "customops.check/1" and [f["code"] for f in newest["findings"]] == ["CO203"]


def test_the_matrix_as_github_annotations_leads_each_finding_with_its_releases(repository, tmp_path):
    out = check(str(repository), "--triton-release", "25.01..25.04", "--load-model", "tf", "--format", "github",
                cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    (co203,) = [line for line in lines if "title=CO203" in line]  # once, with both releases
    assert co203.startswith("::error file=") and "::Triton 25.03, 25.04: model 'tf' needs" in co203
    assert lines[-1] == ("::notice title=customops::Newest release where everything loads, as far as its facts "
                         "tell: 25.02")


def test_the_matrix_as_gitlab_code_quality_is_an_issue_per_finding_and_its_releases(repository, tmp_path):
    """One CO502 in 25.08 and another in 25.10 (their messages name each release's CUDA): two issues, each led by
    its release, with fingerprints of their own."""
    out = check(str(repository), "--triton-release", "25.06..25.10", "--load-model", "cuda_op", "--format", "gitlab",
                cwd=tmp_path)
    issues = json.loads(out.stdout)
    co502 = [i for i in issues if i["check_name"] == "CO502"]
    assert [i["description"].split(": ", 1)[0] for i in co502] == ["Triton 25.08", "Triton 25.10"]
    assert all(i["severity"] == "critical" and i["location"]["path"] for i in co502)
    assert len({i["fingerprint"] for i in issues}) == len(issues)


def test_an_op_library_linked_against_onnx_runtime_1_21_fails_where_the_release_ships_another(repository, tmp_path):
    """Each ONNX Runtime release defines only its own version node (VERS_1.20.1): 25.02 ships 1.20.1, 25.03 and
    25.04 1.21.0, 25.05 1.22.0 (server build.py of each release branch)."""
    report = matrix(repository, "25.02..25.05", tmp_path, "--load-model", "ort_121_op")
    assert report["models"][0]["failing"] == {"25.02": ["CO505"], "25.03": [], "25.04": [], "25.05": ["CO505"]}
    assert report["newest_passing"] == "25.04"


def test_a_library_of_a_framework_whose_version_no_source_states_is_undecided_everywhere(repository, tmp_path):
    """No cited source states the PyTorch of a release: a library that links libtorch_cpu.so is `?`, not ok."""
    report = matrix(repository, "25.02,25.03", tmp_path, "--load-model", "torch_op")
    assert report["models"][0]["undecided"] == {"25.02": ["libtorch_cpu.so: PyTorch"],
                                                "25.03": ["libtorch_cpu.so: PyTorch"]}
    assert report["newest_passing"] is None


def test_a_preload_that_fails_fails_the_server_row_for_every_model(repository, tmp_path):
    """A preload belongs to no one model: when it cannot load, every model goes with the server. The matrix shows it
    on a row of the server's own, never hidden in `ok` model rows."""
    import shutil

    repo = tmp_path / "models"
    shutil.copytree(repository / "tf", repo / "tf")
    (tmp_path / "lib").mkdir()
    shutil.copy(repository / "cuda_op" / "ops" / "libcuda_op.so", tmp_path / "lib" / "libcuda_op.so")
    (tmp_path / "customops.toml").write_text('[host]\npreload = ["lib/libcuda_op.so"]\n')
    report = matrix(repo, "25.02,25.08", tmp_path, "--manifest", str(tmp_path / "customops.toml"))
    rows = {m["name"]: m["failing"] for m in report["models"]}
    assert rows[None] == {"25.02": [], "25.08": ["CO502"]} and rows["tf"] == {"25.02": [], "25.08": ["CO203"]}
    assert report["newest_passing"] == "25.02"


# Found by review (session 8): what the facts do not state is never ok ----------------------------------------------


@pytest.fixture(scope="module")
def unlisted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`cublas_op` links libcublas.so.11, which no release's facts list; `new_gcc_op` needs GCC_13.0.0 of
    libgcc_s (GCC 13's; Ubuntu 22.04's libgcc_s is GCC 12's, 24.04's GCC 14's)."""
    work = tmp_path_factory.mktemp("unlisted")
    cublas = needing(work, "libcublas_op.so", "libcublas.so.11")
    new_gcc = needing(work, "libnew_gcc_op.so", "libgcc_s.so.1", "GCC_13.0.0")
    repo = tmp_path_factory.mktemp("unlisted-repo") / "models"
    onnxruntime_model(repo, "cublas_op", cublas)
    onnxruntime_model(repo, "new_gcc_op", new_gcc)
    return repo


def test_a_library_the_releases_facts_do_not_list_is_undecided_and_fails_the_gate(unlisted, tmp_path):
    report = matrix(unlisted, "24.12,25.08", tmp_path, "--load-model", "cublas_op")
    (model,) = report["models"]
    assert model["failing"] == {"24.12": [], "25.08": []} and set(model["undecided"]) == {"24.12", "25.08"}
    assert not report["ok"] and not any(t["ok"] for t in report["targets"]) and report["newest_passing"] is None
    out = check(str(unlisted), "--triton-release", "24.12,25.08", "--load-model", "cublas_op", cwd=tmp_path)
    assert out.returncode == 1, out.stdout  # a gate passes only what the facts show


def backend_model(work: Path, backend: str, library: Path) -> Path:
    """A repository (work/models) of one model of `backend`, whose library `library` lies in its version
    directory (where the core looks first)."""
    repo = work / "models"
    (repo / backend / "1").mkdir(parents=True)
    (repo / backend / "1" / library.name).write_bytes(library.read_bytes())
    (repo / backend / "config.pbtxt").write_text(f'backend: "{backend}"\n')
    return repo


def test_a_backend_linking_triton_core_is_decided_by_every_release_with_a_server(tmp_path):
    """libtritonserver.so is Triton core itself (tests/test_releases.py holds its SONAME to the real core's): a
    custom backend needing it and nothing else the facts do not state loads as far as they tell."""
    backend = needing(tmp_path, "libtriton_custom.so", "libtritonserver.so", entry=False)
    report = matrix(backend_model(tmp_path, "custom", backend), "24.12,25.08", tmp_path)
    (model,) = report["models"]
    assert model["undecided"] == {} and model["failing"] == {"24.12": [], "25.08": []}


def test_a_library_built_for_another_python_fails_where_the_release_ships_another_libpython(tmp_path):
    """A release's image has one Python, Ubuntu's python3, and its libpython3-dev (server build.py): 20.04's 3.8
    until 23.04, 22.04's 3.10 from 23.05, 24.04's 3.12 from 24.11. A backend (or a stub) built against Python 3.10
    loads only where that is the release's ("libpython3.10.so.1.0: cannot open shared object file" elsewhere,
    server#4398)."""
    backend = needing(tmp_path, "libtriton_embedded.so", "libpython3.10.so.1.0", entry=False)
    report = matrix(backend_model(tmp_path, "embedded", backend), "23.04,23.05,24.10,24.11", tmp_path)
    (model,) = report["models"]
    assert model["failing"] == {"23.04": ["CO302"], "23.05": [], "24.10": [], "24.11": ["CO302"]}
    assert model["undecided"] == {} and report["newest_passing"] == "24.10"
    (first, last) = [f for f in report["findings"] if f["code"] == "CO302"]
    assert first["targets"] == ["23.04"] and "the container's Python is 3.8" in first["message"]
    assert last["predicted"] == "libpython3.10.so.1.0: cannot open shared object file: No such file or directory"


def test_a_gcc_13_unwinder_node_fails_where_libgcc_is_gcc_12s(unlisted, tmp_path):
    report = matrix(unlisted, "24.10,24.11", tmp_path, "--load-model", "new_gcc_op")
    assert report["models"][0]["failing"] == {"24.10": ["CO306"], "24.11": []}
    assert report["newest_passing"] == "24.11"


def test_a_model_the_server_is_asked_for_that_no_repository_has_is_a_row(repository, tmp_path):
    report = matrix(repository, "25.02,25.03", tmp_path, "--load-model", "nosuch")
    assert {m["name"]: m["failing"] for m in report["models"]}["nosuch"] == {"25.02": ["CO108"],
                                                                            "25.03": ["CO108"]}


@pytest.mark.parametrize(("releases", "said"), [("25.03..25.01", "ends before it starts"),
                                                 ("25.01,,25.02", "an empty release"), ("..", "an empty release"),
                                                 ("9" * 5000, "unknown Triton release")])
def test_a_release_list_that_names_nothing_is_one_line(repository, tmp_path, releases, said):
    out = check(str(repository), "--triton-release", releases, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and said in out.stderr
    assert len(out.stderr) < 400


def test_a_server_version_past_the_century_names_no_release():
    from customops.triton.releases import release_of_server

    assert release_of_server("2.9999.0") is None and release_of_server("2.73.0") == "26.09"


def test_the_matrix_as_junit_names_each_suite_by_its_release(repository, tmp_path):
    import xml.etree.ElementTree as ET

    out = check(str(repository), "--triton-release", "25.02,25.03", "--load-model", "tf", "--format", "junit",
                cwd=tmp_path)
    suites = {s.get("name"): s.get("failures") for s in ET.fromstring(out.stdout).iter("testsuite")}
    assert suites == {"tf (Triton 25.02)": "0", "tf (Triton 25.03)": "1"}, suites


def test_the_matrix_as_sarif_leads_each_result_with_its_releases(repository, tmp_path):
    out = check(str(repository), "--triton-release", "25.02..25.04", "--load-model", "tf", "--format", "sarif",
                cwd=tmp_path)
    sarif = json.loads(out.stdout)
    schema = ROOT.parent / "shared" / "data" / "sarif-schema-2.1.0.json"
    if schema.exists():
        from jsonschema import Draft7Validator

        Draft7Validator(json.loads(schema.read_text())).validate(sarif)
    results = sarif["runs"][0]["results"]
    co203 = [r for r in results if r["ruleId"] == "CO203"]
    assert [r["properties"]["targets"] for r in co203] == [["25.03", "25.04"]]
    assert co203[0]["message"]["text"].startswith("Triton 25.03, 25.04: ")


# The matrix reads the files once and plans once per layout: each column is still its release checked alone ------------


def test_each_releases_column_equals_that_release_checked_alone(repository, tmp_path):
    """The matrix reads the repository and plans the loads once for the releases that agree in what planning reads
    (app/planning.planned_from); the rest is held to each release's facts. Every release the table can check,
    over models each release rule decides (CUDA, libstdc++, ONNX Runtime, the TensorFlow backend, a framework's
    library), gives the same findings, undecided needs, notes and exit status in its column as checked alone."""
    from customops.app.check_command import check_request
    from customops.app.checking import check_repositories
    from customops.app.matrix import columns_of, run_matrix
    from customops.cli import build_parser
    from customops.commands.check import check_command
    from customops.triton.releases import targets

    args = build_parser("check").parse_args(["check", str(repository), "--triton-release", "23.01..26.08",
                                             "--no-cache"])
    request = check_request(check_command(args))
    columns = columns_of(request, ())
    releases = targets(request.container.release)
    assert len(releases) == 44 and [c.name for c in columns] == list(releases)
    together = run_matrix(request, columns)

    def seen(run) -> tuple:
        r = run.result
        return (run.exit_code, [(f.code, f.model, f.library, f.message, f.predicted) for f in r.findings],
                sorted(r.undecided), r.notes)

    for column, run in zip(columns, together.runs, strict=True):
        assert seen(run) == seen(check_repositories(replace(request, container=column.choice))), column.name
