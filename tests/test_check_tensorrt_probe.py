"""`check --probe` on TensorRT plugin libraries: the server's plugin libraries are probed in its load order
against customops' recording stand-in for libnvinfer (no TensorRT, no GPU here), and TensorRT's rule that the
first registration of a (namespace, name, version) wins becomes CO406 on the library loaded later; a library
whose registrations the probe cannot see is CO410, not a pass. The fixture libraries are compiled against
TensorRT's real headers (fixtures/tensorrt.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft7Validator
from test_probe_tensorrt import declared

from customops.linker.target import target_for_root
from customops.probe import tensorrt_standin
from customops.probe.groups import ProbedGroup, ProbeSettings, probe_plan
from customops.rules import probed_tensorrt
from customops.triton.plan import LoadedBy, LoadPlan, LoadStep, Purpose
from fixtures import tensorrt as built
from fixtures import tensorrt_runtime, wheels

pytestmark = [
    pytest.mark.skipif(not built.available(), reason=f"TensorRT's public headers are not under {built.HEADERS}"),
    pytest.mark.skipif(tensorrt_standin.compiler() is None, reason="no C++ compiler to build the stand-in"),
]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plugins() -> Path:
    return built.build() / "v10.7.0"


def repository(tmp_path: Path, plugins: Path, *libraries: str) -> Path:
    """A TensorRT model and a manifest whose [tensorrt] plugins are `libraries`, in that order."""
    repo = tmp_path / "models"
    (repo / "seg" / "1").mkdir(parents=True)
    (repo / "seg" / "config.pbtxt").write_text('name: "seg"\nplatform: "tensorrt_plan"\nmax_batch_size: 1\n')
    (repo / "seg" / "1" / "model.plan").write_bytes(b"\0" * 16)
    (repo / "seg" / "plugins").mkdir()
    for name in libraries:
        shutil.copy(plugins / name, repo / "seg" / "plugins" / name)
    listed = ", ".join(f'"seg/plugins/{name}"' for name in libraries)
    (repo / "customops.toml").write_text(f'[tensorrt]\nplugins = [{listed}]\nload = "backend-config"\n')
    return repo


def check(repo: Path, container: Path, tmp_path: Path, *extra: str) -> dict:
    """The JSON report, valid by its published schema."""
    result = subprocess.run([sys.executable, "-m", "customops", "check", str(repo), "--container-root",
                             str(container), "--probe", "--format", "json", "--cache-dir", str(tmp_path / "cache"),
                             *extra], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    Draft7Validator(json.loads((ROOT / "customops" / "schemas" / "check-1.json").read_text())).validate(report)
    return report


def of(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


@pytest.mark.parametrize(("first", "second"), [("libduplicate_a.so", "libduplicate_b.so"),
                                               ("libduplicate_b.so", "libduplicate_a.so")])
def test_the_plugin_library_loaded_second_loses_the_shared_name_to_the_first(plugins, tree, tmp_path, first,
                                                                             second):
    repo = repository(tmp_path, plugins, first, second)
    report = check(repo, tree / "container", tmp_path)
    (duplicate,) = of(report, "CO406")
    assert duplicate["library"] == f"/models/seg/plugins/{second}"
    assert duplicate["symbol"] == "::FixtureShared/1"
    assert f"/models/seg/plugins/{first} registered first" in duplicate["message"]
    assert duplicate["predicted"] == "Plugin creator already registered - ::FixtureShared version 1"
    assert duplicate["file"] == "customops.toml" and duplicate["artifact"] == f"seg/plugins/{second}"
    assert not of(report, "CO102")  # the repository is a valid one: only the collision is found
    (group,) = [g for g in report["probes"] if g["framework"] == "tensorrt"]
    registered = {lib["library"]: lib["registered"] for lib in group["libraries"]}
    own = {"libduplicate_a.so": "::FixtureOnlyA/1", "libduplicate_b.so": "::FixtureOnlyB/1"}
    for name, only in own.items():
        assert sorted(registered[f"/models/seg/plugins/{name}"]) == sorted(["::FixtureShared/1", only])
    assert any("TensorRT plugin libraries against customops' stand-in for libnvinfer.so.10" in n
               for n in report["notes"])


def test_a_namespaced_creator_taking_an_earlier_librarys_place_is_CO406_and_neither_is_found(plugins, tree,
                                                                                             tmp_path):
    report = check(repository(tmp_path, plugins, "libduplicate_a.so", "libnamespaced_shared.so"), tree / "container",
                   tmp_path)
    (replaced,) = of(report, "CO406")
    assert replaced["library"] == "/models/seg/plugins/libnamespaced_shared.so"
    assert replaced["symbol"] == "own_ns::FixtureShared/1" and "getCreator finds neither" in replaced["message"]
    assert "/models/seg/plugins/libduplicate_a.so registered ::FixtureShared/1 before" in replaced["message"]
    assert replaced["predicted"] == "getPluginCreator could not find plugin FixtureShared version 1"
    assert not of(report, "CO411")  # said once, by the CO406


def test_a_creator_refused_by_an_unreachable_one_is_CO406_and_neither_is_found(plugins, tree, tmp_path):
    report = check(repository(tmp_path, plugins, "libnamespaced_shared.so", "libduplicate_a.so"), tree / "container",
                   tmp_path)
    (refused,) = of(report, "CO406")
    assert refused["library"] == "/models/seg/plugins/libduplicate_a.so" and refused["symbol"] == "::FixtureShared/1"
    assert "(whose creator names namespace 'own_ns' but was registered in '')" in refused["message"]
    assert refused["message"].endswith("TensorRT's registry refuses the second registration, and getCreator finds "
                                       "neither")
    (lost,) = of(report, "CO411")
    assert lost["library"] == "/models/seg/plugins/libnamespaced_shared.so"


def test_a_namespaced_creator_registered_by_REGISTER_TENSORRT_PLUGIN_is_CO411(plugins, tree, tmp_path):
    report = check(repository(tmp_path, plugins, "libstatic_v1.so"), tree / "container", tmp_path)
    (lost,) = of(report, "CO411")
    assert lost["symbol"] == "fixture_ns::FixtureNms/1" and "registered in ''" in lost["message"]
    assert lost["predicted"] == "getPluginCreator could not find plugin FixtureNms version 1"


def test_a_library_whose_creators_only_its_entry_points_return_is_CO410(plugins, tree, tmp_path):
    report = check(repository(tmp_path, plugins, "libentry_v3.so"), tree / "container", tmp_path)
    (unseen,) = of(report, "CO410")
    assert "registered no plugin creator" in unseen["message"] and "loadLibrary" in unseen["evidence"][0]
    (group,) = [g for g in report["probes"] if g["framework"] == "tensorrt"]
    (library,) = group["libraries"]
    assert all(name.endswith(" [entry point: not registered by dlopen]") for name in library["registered"])


def test_a_plugin_library_that_registers_nothing_is_CO410_not_a_pass(plugins, tree, tmp_path):
    repo = repository(tmp_path, plugins, "libnothing.so", "libstatic_v1.so")
    report = check(repo, tree / "container", tmp_path)
    (unseen,) = of(report, "CO410")
    assert unseen["library"] == "/models/seg/plugins/libnothing.so"
    assert "registered no plugin creator" in unseen["message"]
    assert not of(report, "CO406")


def test_a_plugin_library_of_a_major_without_a_layout_is_CO410(tree, tmp_path):
    needs12 = built.build()
    source = next(needs12.glob("**/needs12/libnothing.so"))
    repo = repository(tmp_path, source.parent, "libnothing.so")
    report = check(repo, tree / "container", tmp_path)
    (unseen,) = of(report, "CO410")
    assert "needs libnvinfer.so.12" in unseen["message"]


# -- TensorRT's built-in plugins: the container's libnvinfer_plugin.so.N, initialized after the plugin libraries
BUILTIN_DIRECTORY = "/usr/lib/x86_64-linux-gnu"  # a directory of the fixture container's default search


def with_builtin(container: Path, plugins: Path) -> str:
    """The fixture libnvinfer_plugin.so.10 put into the (copied) container; its path there."""
    name = built.BUILTIN.format(major=10)
    shutil.copy(plugins / "libbuiltin.so", container / BUILTIN_DIRECTORY.lstrip("/") / name)
    return f"{BUILTIN_DIRECTORY}/{name}"


def test_a_plugin_library_registering_a_built_in_name_wins_over_tensorrts_own(plugins, container, tmp_path):
    builtin = with_builtin(container, plugins)
    (shared,) = declared("builtin") & declared("shadow_builtin")
    report = check(repository(tmp_path, plugins, "libshadow_builtin.so"), container, tmp_path)
    (shadowing,) = of(report, "CO406")
    assert shadowing["library"] == "/models/seg/plugins/libshadow_builtin.so" and shadowing["symbol"] == shared
    assert f"TensorRT's built-in plugin creator(s) of {builtin} ({shared})" in shadowing["message"]
    assert "initLibNvInferPlugins) after loading the plugin libraries" in shadowing["message"]
    namespace, _, rest = shared.partition("::")
    name, version = rest.split("/")
    assert shadowing["predicted"] == f"Plugin creator already registered - {namespace}::{name} version {version}"
    assert not of(report, "CO410")
    (group,) = [g for g in report["probes"] if g["framework"] == "tensorrt"]
    assert group["builtin"]["library"] == builtin
    assert {n.partition(" [refused")[0] for n in group["builtin"]["registered"]} == declared("builtin")


def test_a_plugin_library_with_names_of_its_own_shadows_no_built_in(plugins, container, tmp_path):
    with_builtin(container, plugins)
    assert declared("static_v1") and not declared("static_v1") & declared("builtin")
    report = check(repository(tmp_path, plugins, "libstatic_v1.so"), container, tmp_path)
    assert not of(report, "CO406") and not of(report, "CO410")


def probed_group(plugins: Path, root: Path, tmp_path: Path, *libraries: str) -> ProbedGroup:
    """The TensorRT group of a plan that loads `libraries` from the TensorRT backend of the container at `root`."""
    backend = "/opt/tritonserver/backends/tensorrt/libtriton_tensorrt.so"
    steps = [LoadStep(backend, str(root / backend.lstrip("/")), LoadedBy.BACKEND, Purpose.BACKEND_LIBRARY)]
    steps += [LoadStep(f"/models/{name}", str(plugins / name), LoadedBy.TENSORRT, Purpose.PLUGIN_LIBRARY)
              for name in libraries]
    settings = ProbeSettings(sys.executable, None, cache_dir=tmp_path / "cache", target=target_for_root(str(root)))
    (group,) = probe_plan(LoadPlan((), tuple(steps), (), ()), settings)
    return group


def test_the_built_in_names_are_read_from_the_containers_own_library(plugins, container, tmp_path):
    builtin = with_builtin(container, plugins)
    group = probed_group(plugins, container, tmp_path, "libshadow_builtin.so")
    assert group.builtin is not None and group.builtin.path == builtin and group.builtin.result is not None
    names = {r.partition(" [refused")[0] for r in group.builtin.result.registered}
    assert names == declared("builtin")
    assert probed_tensorrt.notes(group) == [
        f"probed TensorRT's built-in plugins: {builtin}'s initLibNvInferPlugins registered {len(names)} plugin "
        "creator(s) after the plugin libraries, 1 of them refused"]


def test_a_container_without_libnvinfer_plugin_probes_no_built_in(plugins, tree, tmp_path):
    group = probed_group(plugins, tree / "container", tmp_path, "libduplicate_a.so")
    assert group.builtin is not None and group.builtin.result is None
    assert probed_tensorrt.check(group) == []
    (note,) = probed_tensorrt.notes(group)
    assert note.startswith("not probed: TensorRT's built-in plugins (the container has no libnvinfer_plugin.so.10")


def test_a_cached_probe_result_is_used_only_while_customops_own_stand_in_recipe_is_the_same(plugins, tree, tmp_path,
                                                                                          monkeypatch):
    """The results are cached by the libraries' identities and by everything of customops they depend on (the
    stand-in's source, the modules that build and run it): a changed recipe probes again."""
    first = probed_group(plugins, tree / "container", tmp_path, "libstatic_v1.so")
    calls = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return original(*args, **kwargs)

    original = tensorrt_standin.probe_plugins
    monkeypatch.setattr(tensorrt_standin, "probe_plugins", counted)
    assert probed_group(plugins, tree / "container", tmp_path, "libstatic_v1.so").alone == first.alone
    assert calls == []  # from the cache
    monkeypatch.setattr(tensorrt_standin, "recipe_digest", lambda: "another recipe")
    assert probed_group(plugins, tree / "container", tmp_path, "libstatic_v1.so").alone == first.alone
    assert len(calls) == 1


def test_a_container_whose_libnvinfer_loads_here_has_tensorrts_own_registry_answer(plugins, container, tmp_path):
    """The container's libnvinfer.so.10 (here TensorRT's real dispatch runtime under that name), found as the
    TensorRT backend finds it, answers the registrations; the notes say so."""
    try:
        runtime = tensorrt_runtime.runtime(10)
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    installed = container / BUILTIN_DIRECTORY.lstrip("/") / "libnvinfer.so.10"
    shutil.copy(runtime.directory / "libnvinfer.so.10", installed)
    report = check(repository(tmp_path, plugins, "libduplicate_a.so", "libduplicate_b.so"), container, tmp_path)
    (duplicate,) = of(report, "CO406")
    assert duplicate["library"] == "/models/seg/plugins/libduplicate_b.so"
    (note,) = [n for n in report["notes"] if n.startswith("probed 2 TensorRT plugin libraries")]
    assert f"against TensorRT's own registry in {installed}, recorded by customops' stand-in" in note


def test_a_containers_libnvinfer_that_does_not_answer_leaves_the_stand_in_to_answer(plugins, tree, tmp_path):
    """The fixture container's libnvinfer.so.10 has a getPluginRegistry() whose object is no registry: asked in a
    preflight run, it crashes there, and the probe answers with the stand-in's registry, saying why."""
    repo = repository(tmp_path, plugins, "libduplicate_a.so", "libduplicate_b.so")
    report = check(repo, tree / "container", tmp_path)
    assert of(report, "CO406") and not of(report, "CO410")
    (note,) = [n for n in report["notes"] if n.startswith("probed 2 TensorRT plugin libraries")]
    assert "against customops' stand-in for libnvinfer.so.10 (TensorRT's own " in note
    assert "libnvinfer.so.10 did not answer here: " in note and "SIGSEGV" in note, note
