"""The real Triton core (tests/triton_core.py) as the oracle for customops' repository and backend rules.

Summary: 61 scenarios; customops agrees with the core on 60 (the XFAIL table is empty), and 1 (a model name in
two repositories) is skipped: mini_tritonserver takes one --model-repository. When the core aborts
(config_pbtxt_is_a_directory: std::length_error) no model is served, and only the verdicts are compared. More
scenarios: tests/test_triton_core_corpus.py.

Each scenario is a small container root (the real server: mini_tritonserver as tritonserver, the real
libtritonserver.so and the libraries they need, tests/triton_core.server_root; the scenario's /models and
/opt/tritonserver/backends with the real example backends renamed as the seed walkthrough does) checked twice:
by customops (`customops check --container-root ROOT -- tritonserver ARGS`, its models' CO1xx-CO3xx errors)
and by the real core (mini_tritonserver run at /models and /opt/tritonserver/backends in a private mount
namespace + chroot). For every model both must agree on whether it is UNAVAILABLE, and where the core gives a
reason, one of customops' predicted messages (Finding.predicted) must contain that reason after its status
prefix ("Invalid argument: " ...; an ensemble's up to where it quotes its step model's message). A scenario
where customops disagrees is `xfail(strict=True, reason=<what customops does wrong>)`: it fails once fixed, so
the mark goes with the fix.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import triton_core

from customops import cli
from customops.app.check import default_mounts, run_check
from customops.codes import Severity
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest

BACKENDS = "opt/tritonserver/backends"
# an ensemble's message quotes its step model's own ("... Model 'm' loading failed with error: <m's message>"),
# which is compared on that model: the ensemble's is compared up to there
NESTED = re.compile(r" Model '[^']*' (?:loading )?failed with error: ")
SOURCES = Path(__file__).resolve().parent.parent / "fixtures" / "src"
STATUS = re.compile(r"^(?:Invalid argument|Internal|Not found|Unavailable|Unsupported|Already exists|Unknown): ")


@dataclass(frozen=True)
class Lib:
    """A real example backend from the core's build (minimal, recommended, bls), copied under a new name."""

    example: str = "minimal"


@dataclass(frozen=True)
class Link:
    target: str


@dataclass(frozen=True)
class Built:
    """A shared library built from C source with gcc (a backend that is not one of the examples)."""

    source: str


DIR = object()
Files = Mapping[str, object]  # path under the root -> text, bytes, Lib, Built, Link or DIR


@dataclass(frozen=True)
class Scenario:
    files: Files
    args: tuple[str, ...] = ()
    repositories: tuple[str, ...] = ("/models",)


MINIMAL = 'backend: "mybackend"\n'
IO = ('input [ { name: "IN0" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
      'output [ { name: "OUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]\n')
MYBACKEND = {f"{BACKENDS}/mybackend/libtriton_mybackend.so": Lib()}


def model(name: str = "m", config: str | None = MINIMAL, versions: tuple[str, ...] = ("1",),
          extra: Files | None = None) -> Files:
    """models/<name>/: its version directories, config.pbtxt (None: none) and `extra` files (paths under it)."""
    files: dict[str, object] = {f"models/{name}/{v}/": DIR for v in versions}
    if config is not None:
        files[f"models/{name}/config.pbtxt"] = config
    files.update({f"models/{name}/{k}": v for k, v in (extra or {}).items()})
    return files


def s(*parts: Files, **kw: Any) -> Scenario:
    files: dict[str, object] = {}
    for p in parts:
        files.update(p)
    return Scenario(files, **kw)


def ensemble(step: str) -> str:
    return ('name: "ens"\nplatform: "ensemble"\n' + IO.replace("IN0", "EIN").replace("OUT0", "EOUT") +
            'ensemble_scheduling { step [ { model_name: "' + step + '" model_version: -1 '
            'input_map { key: "IN0" value: "EIN" } output_map { key: "OUT0" value: "EOUT" } } ] }\n')


SCENARIOS = [
    ("backend_found_in_backend_directory", s(model(), MYBACKEND)),
    ("backend_found_in_version_directory", s(model(extra={"1/libtriton_mybackend.so": Lib()}))),
    ("backend_found_in_model_directory", s(model(extra={"libtriton_mybackend.so": Lib()}))),
    ("backend_missing_everywhere", s(model(config='backend: "nope"\n'), MYBACKEND)),
    ("backend_library_named_like_a_directory",
     s(model(), {f"{BACKENDS}/mybackend/libtriton_mybackend.so/": DIR})),
    ("backend_library_wrong_file_name", s(model(), {f"{BACKENDS}/mybackend/libmybackend.so": Lib()})),
    ("runtime_names_another_library_in_backend_directory",
     s(model(config=MINIMAL + 'runtime: "libother.so"\n'), {f"{BACKENDS}/mybackend/libother.so": Lib()})),
    ("runtime_library_missing", s(model(config=MINIMAL + 'runtime: "libother.so"\n'), MYBACKEND)),
    ("runtime_escapes_with_dotdot",
     s(model(config=MINIMAL + 'runtime: "../../../../models/m/libesc.so"\n', extra={"libesc.so": Lib()}), MYBACKEND)),
    ("runtime_symlink_escaping_the_backend_directory",
     s(model(config=MINIMAL + 'runtime: "libesc.so"\n'), MYBACKEND,
       {f"{BACKENDS}/mybackend/libesc.so": Link("/models/m/libesc.so"), "models/m/libesc.so": Lib()})),
    ("config_name_differs_from_directory", s(model(config='name: "other"\n' + MINIMAL), MYBACKEND)),
    ("hidden_directory_is_not_a_model",
     s(model(), MYBACKEND, {"models/.ipynb_checkpoints/": DIR, "models/.ipynb_checkpoints/config.pbtxt": "x"})),
    ("version_directory_1abc_is_not_a_version", s(model(versions=("1abc",)), MYBACKEND)),
    ("version_directory_01_is_not_a_version", s(model(versions=("01",)), MYBACKEND)),
    ("version_directory_0_is_a_version", s(model(versions=("0",)), MYBACKEND)),
    ("no_version_directory", s(model(versions=()), MYBACKEND)),
    ("version_policy_latest_num_versions_0",
     s(model(config=MINIMAL + "version_policy: { latest: { num_versions: 0 } }\n"), MYBACKEND)),
    ("version_policy_latest_num_versions_2",
     s(model(config=MINIMAL + "version_policy: { latest: { num_versions: 2 } }\n", versions=("1", "2", "3")),
       MYBACKEND)),
    ("version_policy_specific_version_present",
     s(model(config=MINIMAL + "version_policy: { specific: { versions: [2] } }\n", versions=("1", "2")),
       MYBACKEND)),
    ("version_policy_specific_version_missing",
     s(model(config=MINIMAL + "version_policy: { specific: { versions: [5] } }\n"), MYBACKEND)),
    ("config_with_utf8_bom", s(model(config="\ufeff" + MINIMAL), MYBACKEND)),
    ("config_empty_backend_undetermined", s(model(config=""), MYBACKEND)),
    ("no_config_auto_complete_cannot_tell_backend", s(model(config=None), MYBACKEND)),
    ("no_config_with_auto_complete_disabled", s(model(config=None), MYBACKEND,
                                                args=("--disable-auto-complete-config",))),
    ("unknown_config_field", s(model(config=MINIMAL + "no_such_field: 1\n"), MYBACKEND)),
    ("config_syntax_error", s(model(config='backend: "mybackend"\nmax_batch_size: [\n'), MYBACKEND)),
    ("platform_tensorrt_plan_backend_absent", s(model(config='platform: "tensorrt_plan"\n'), MYBACKEND)),
    ("platform_onnxruntime_onnx_backend_absent", s(model(config='platform: "onnxruntime_onnx"\n'), MYBACKEND)),
    ("platform_pytorch_libtorch_backend_absent", s(model(config='platform: "pytorch_libtorch"\n'), MYBACKEND)),
    ("platform_tensorflow_savedmodel_backend_absent",
     s(model(config='platform: "tensorflow_savedmodel"\n'), MYBACKEND)),
    ("platform_and_backend_disagree", s(model(config='platform: "onnxruntime_onnx"\n' + MINIMAL), MYBACKEND)),
    ("default_model_filename_missing_is_backend_business",
     s(model(config=MINIMAL + 'default_model_filename: "model.bin"\n'), MYBACKEND)),
    ("model_config_name_selects_configs_file",
     s(model(config='backend: "nope"\n', extra={"configs/prod.pbtxt": MINIMAL}), MYBACKEND,
       args=("--model-config-name=prod",))),
    ("model_config_name_falls_back_to_config_pbtxt",
     s(model(), MYBACKEND, args=("--model-config-name=prod",))),
    ("duplicate_model_name_across_two_repositories",
     s(model(), MYBACKEND, {"models2/m/config.pbtxt": MINIMAL, "models2/m/1/": DIR},
       repositories=("/models", "/models2"))),
    ("explicit_load_of_a_model_that_does_not_exist",
     s(model(), MYBACKEND, args=("--load-model=ghost",))),
    ("python_based_backend_model_py_in_backend_directory",
     s(model(config='backend: "mypy"\n'), {f"{BACKENDS}/mypy/model.py": "class TritonPythonModel: pass\n",
                                           f"{BACKENDS}/python/libtriton_python.so": Lib()})),
    ("python_based_backend_without_python_backend",
     s(model(config='backend: "mypy"\n'), {f"{BACKENDS}/mypy/model.py": "class TritonPythonModel: pass\n"})),
    ("hidden_directory_without_config", s(model(), MYBACKEND, {"models/.ipynb_checkpoints/": DIR})),
    ("runtime_absolute_path",
     s(model(config=MINIMAL + f'runtime: "/{BACKENDS}/mybackend/libtriton_mybackend.so"\n'), MYBACKEND)),
    ("file_in_repository_root_is_not_a_model", s(model(), MYBACKEND, {"models/README.md": "notes\n"})),
    ("version_entry_that_is_a_file_is_ignored", s(model(extra={"2": "not a directory\n"}), MYBACKEND)),
    ("version_directory_negative", s(model(versions=("-1",)), MYBACKEND)),
    ("version_policy_all", s(model(config=MINIMAL + "version_policy: { all: {} }\n", versions=("1", "2")),
                             MYBACKEND)),
    ("config_name_equal_to_directory", s(model(config='name: "m"\n' + MINIMAL), MYBACKEND)),
    ("runtime_found_in_version_directory",
     s(model(config=MINIMAL + 'runtime: "libother.so"\n', extra={"1/libother.so": Lib()}))),
    ("model_directory_entry_named_like_the_backend_library",
     s(model(extra={"libtriton_mybackend.so/": DIR}), MYBACKEND)),
    ("backend_library_is_a_broken_symlink",
     s(model(), {f"{BACKENDS}/mybackend/libtriton_mybackend.so": Link("/nowhere/libtriton_mybackend.so")})),
    ("version_directory_plus_1", s(model(versions=("+1",)), MYBACKEND)),
    ("version_policy_specific_one_present_one_missing",
     s(model(config=MINIMAL + "version_policy: { specific: { versions: [1, 5] } }\n"), MYBACKEND)),
    ("config_pbtxt_is_a_directory", s(model(config=None, extra={"config.pbtxt/": DIR}), MYBACKEND)),
    ("recommended_example_backend_renamed",
     s(model(config=MINIMAL + IO), {f"{BACKENDS}/mybackend/libtriton_mybackend.so": Lib("recommended")})),
    ("python_backend_itself_renamed_minimal",
     s(model(config='backend: "python"\n'), {f"{BACKENDS}/python/libtriton_python.so": Lib()})),
    ("ensemble_composing_an_unavailable_model",
     s(model(config='backend: "nope"\n' + IO), model("ens", config=ensemble("m")), MYBACKEND)),
    ("version_directory_entry_named_like_the_backend_library",
     s(model(extra={"1/libtriton_mybackend.so/": DIR}), MYBACKEND)),
    ("ensemble_without_ensemble_scheduling", s(model("ens", config='platform: "ensemble"\n' + IO), MYBACKEND)),
    ("backend_library_in_backend_directory_of_another_backend",
     s(model(), {f"{BACKENDS}/other/libtriton_mybackend.so": Lib()})),
    ("ensemble_composing_a_missing_model", s(model("ens", config=ensemble("ghost")), MYBACKEND)),
    ("tensorflow_backend_without_a_platform_or_model_file",
     s(model(config='backend: "tensorflow"\n', extra={"1/model.bin": ""}), MYBACKEND)),
    ("ensemble_composing_an_available_model",
     s(model(config=MINIMAL + IO), model("ens", config=ensemble("m")), MYBACKEND)),
    ("backend_without_the_required_execute_entry_point",  # the core's message ends with dlerror()'s text
     s(model(), {f"{BACKENDS}/mybackend/libtriton_mybackend.so": Built("int TRITONBACKEND_Initialize;\n")})),
]


def build_root(root: Path, scenario: Scenario) -> None:
    core = triton_core.core()
    triton_core.server_root(root)
    (root / BACKENDS).mkdir(parents=True, exist_ok=True)
    for repo in scenario.repositories:
        (root / repo.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for rel, what in scenario.files.items():
        path = root / rel
        if what is DIR:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, Lib):
            shutil.copy2(core / "backends" / f"libtriton_{what.example}.so", path)
        elif isinstance(what, Built):
            subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), "-xc", "-"], input=what.source, text=True,
                           check=True)
        elif isinstance(what, Link):
            os.symlink(what.target, path)
        elif isinstance(what, bytes):
            path.write_bytes(what)
        else:
            path.write_text(str(what), encoding="utf-8")


# The Python backend's own rules: its stand-in here (the minimal example, renamed libtriton_python.so) starts no stub,
# so what the real backend's stub needs is outside this oracle (tests/test_python_stub.py holds it to the real ld.so).
PYTHON_BACKENDS_OWN = ("CO310", "CO311", "CO312")


def customops_verdicts(root: Path, scenario: Scenario) -> dict[str, list[str | None]]:
    """model -> the predicted messages of its CO1xx-CO3xx errors (repository, backend, loading; an empty list:
    available), from `customops check --container-root ROOT -- tritonserver ARGS`, the server's own command
    line read by the parser launch uses."""
    server = ["tritonserver", *(f"--model-repository={r}" for r in scenario.repositories), *scenario.args]
    if asked_for(scenario) is not None:  # mini_tritonserver implies it; tritonserver requires it
        server.append("--model-control-mode=explicit")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["check", "--container-root", str(root), "--format", "json", "--no-cache", "--", *server])
    report = json.loads(out.getvalue())
    verdicts: dict[str, list[str | None]] = {m["name"]: [] for m in report["models"]}
    for f in report["findings"]:
        if f["code"] in PYTHON_BACKENDS_OWN:
            continue
        if f["model"] and f["code"][:3] in ("CO1", "CO2", "CO3") and f["severity"] == "error":
            verdicts.setdefault(f["model"], []).append(f["predicted"])
    return verdicts


def asked_for(scenario: Scenario) -> frozenset[str] | None:
    """The models --load-model names (explicit mode), or None: every model."""
    names = [a.split("=", 1)[1] for a in scenario.args if a.startswith("--load-model=")]
    return frozenset(names) if names else None


def disagreements(core: dict[str, tuple[str, str]], ours: dict[str, list[str | None]],
                  only: frozenset[str] | None = None) -> list[str]:
    out = []
    for name in sorted(only or set(core) | set(ours)):  # explicit mode: the models asked for
        state, reason = core.get(name, ("ABSENT", ""))
        unavailable = state not in ("READY", "ABSENT")
        errors = ours.get(name, [])
        if unavailable != bool(errors):
            out.append(f"{name}: core {state} ({reason!r}), customops "
                       f"{'errors ' + repr(errors) if errors else 'no error'}")
            continue
        if unavailable and reason:
            wanted = NESTED.split(STATUS.sub("", reason.splitlines()[0]), 1)[0]
            if not any(p and wanted in p for p in errors):
                out.append(f"{name}: core says {wanted!r}, customops predicts {errors!r}")
    return out


def check(tmp_path: Path, scenario: Scenario) -> None:
    root = tmp_path / "root"
    build_root(root, scenario)
    pairs = [(root / r.lstrip("/"), r) for r in scenario.repositories]
    ours = customops_verdicts(root, scenario)
    try:
        core = triton_core.run(pairs, root / BACKENDS, *scenario.args)
    except triton_core.Crashed:  # the server aborts: no model is served, with no reason to compare
        core = {name: ("UNAVAILABLE", "") for name in ours}
    problems = disagreements(core, ours, asked_for(scenario))
    assert not problems, "\n".join(problems)


XFAIL: dict[str, str] = {}  # what customops does wrong today, per scenario (none at the moment)


@pytest.mark.parametrize("scenario", [
    pytest.param(sc, id=name, marks=[pytest.mark.xfail(strict=True, reason=XFAIL[name])] if name in XFAIL else [])
    for name, sc in SCENARIOS])
def test_customops_agrees_with_the_triton_core(tmp_path: Path, scenario: Scenario) -> None:
    check(tmp_path, scenario)


def test_a_server_that_cannot_start_still_has_every_models_problem_reported(tmp_path: Path) -> None:
    """One run, every problem: a preload whose dependency is missing keeps the server from starting (ld.so, for
    real); customops reports that, then models the server as if it started without that preload, and reports
    every model the core then fails (three, each for its own reason), the linker's ones marked with the
    assumption they were found under."""
    broken = s(model("a", extra={"libtriton_mybackend.so/": DIR}), model("b", config='name: "x"\n' + MINIMAL),
               model("c", config='backend: "nope"\n'), model("ok"), MYBACKEND)
    root = tmp_path / "root"
    build_root(root, broken)
    repo = root / "models"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libgone.so"), "-xc", "/dev/null"], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(repo / "libpre.so"), "-xc", "/dev/null",
                    "-Wl,--no-as-needed", f"-L{tmp_path}", "-l:libgone.so"], check=True)
    (repo / "customops.toml").write_text('[host]\npreload = ["libpre.so"]\n')
    container = from_root(str(root))
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), container,
                       default_mounts([str(repo)], container, (("/models", str(repo)),)))
    errors = [f for f in result.findings if f.level == Severity.ERROR]
    server = [f for f in errors if f.model is None]
    assert [f.code for f in server] == ["CO302"] and "libgone.so" in server[0].message

    stopped = triton_core.output(repo, root / BACKENDS, env={"LD_PRELOAD": "/models/libpre.so"})
    assert server[0].predicted is not None
    assert server[0].predicted.split(": ", 1)[1] in stopped  # after the program's name, ld.so's own words

    core = triton_core.run(repo, root / BACKENDS)  # the server as if the preload were fixed
    ours: dict[str, list[str | None]] = {m.name: [] for m in result.models}
    for f in errors:
        if f.model:
            ours[f.model].append(f.predicted)
    assert sorted(n for n, (state, _) in core.items() if state != "READY") == ["a", "b", "c"]
    assert not disagreements(core, ours)
    linked = [f for f in errors if f.model == "a"]
    assert linked and all(f.assumes and "without /models/libpre.so" in f.assumes for f in linked)


def test_models_after_a_backend_library_that_kills_the_server_are_still_checked(tree: Path, tmp_path: Path) -> None:
    """A backend library whose dlopen stops ld.so on an assertion kills the server (for real) while it loads
    the models; customops reports that, then models the rest as if that library did not stop it: the models
    the core then fails (checked by running it without the killing model) are reported too."""
    broken = s(model("a", extra={"libv.so": (tree / "e/unver/libv.so").read_bytes()}),
               model("b", extra={"libtriton_mybackend.so/": DIR}), model("c", config='backend: "nope"\n'),
               model("ok"), MYBACKEND)
    root = tmp_path / "root"
    build_root(root, broken)
    repo = root / "models"
    # its verneed names libv.so (found beside it, by RUNPATH $ORIGIN), whose copy there has no versions
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(repo / "a/libtriton_mybackend.so"),
                    str(SOURCES / "versioned_user.c"), str(tree / "e/v12/libv.so"),
                    "-Wl,--enable-new-dtags,-rpath,$ORIGIN"], check=True)
    ours = customops_verdicts(root, broken)
    assert "Inconsistency detected by ld.so" in triton_core.output(repo, root / BACKENDS)
    assert any(p and "Inconsistency detected by ld.so" in p for p in ours["a"])

    shutil.rmtree(repo / "a")
    core = triton_core.run(repo, root / BACKENDS)
    del ours["a"]
    assert sorted(n for n, (state, _) in core.items() if state != "READY") == ["b", "c"]
    assert not disagreements(core, ours)
