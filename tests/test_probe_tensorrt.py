"""customops probe --framework tensorrt: the plugin creators a library registers, learnt by loading it in the
sandbox against customops' recording stand-in for libnvinfer.so.N (no TensorRT, no GPU). The fixture plugin
libraries (fixtures/tensorrt.py) are compiled against TensorRT's real headers of each release; every test
compares what the probe reports with what the fixture's own source declares."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from customops.probe import tensorrt_standin
from customops.probe.frameworks import probe_group
from customops.probe.results import ProbeStatus
from customops.probe.tensorrt_registrations import Fate
from customops.probe.tensorrt_standin import PluginOutcome, probe_plugins
from fixtures import tensorrt as built

pytestmark = [
    pytest.mark.skipif(not built.available(), reason=f"TensorRT's public headers are not under {built.HEADERS}"),
    pytest.mark.skipif(tensorrt_standin.compiler() is None, reason="no C++ compiler to build the stand-in"),
]
CREATOR = re.compile(r'^V[13]_CREATOR\(\s*\w+,\s*(\w+|"[^"]*"),\s*"([^"]*)",\s*"([^"]*)"\)', re.MULTILINE)
SOURCES = {case: (source, defines, majors) for case, source, defines, majors in built.CASES}
# What TensorRT's registry does with them (tests/test_probe_tensorrt_real.py holds it to the real one):
UNREACHABLE = " [unreachable: registered in namespace '']"  # REGISTER_TENSORRT_PLUGIN of a namespaced creator
ENTRY = " [entry point: not registered by dlopen]"  # getCreators/getPluginCreators: loadLibrary alone calls them


def tags_for(case: str) -> list[str]:
    return [tag for tag, major in built.TAGS.items() if major in SOURCES[case][2]]


def declared(case: str) -> set[str]:
    """"namespace::name/version" of every creator the fixture's source declares (its *_CREATOR calls), the
    name a -D of the case gives where the source names a macro."""
    source, defines, _ = SOURCES[case]
    macros = dict(d.split("=", 1) for d in defines)
    return {f"{ns}::{macros.get(name, name).strip(chr(34))}/{version}"
            for name, version, ns in CREATOR.findall((built.SOURCES / source).read_text())}


def reported(case: str) -> set[str]:
    """What the probe reports for the fixture loaded alone: declared(case), each with what the registry did."""
    text = (built.SOURCES / SOURCES[case][0]).read_text()
    entry = "getCreators" in text or "getPluginCreators" in text
    return {name + (ENTRY if entry else UNREACHABLE if not name.startswith("::") else "") for name in declared(case)}


@pytest.fixture(scope="session")
def plugins() -> Path:
    return built.build()


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("standin-cache")


def probe(cache: Path, *libraries: Path) -> tuple[tensorrt_standin.PluginProbe, ...]:
    return probe_plugins(tuple(str(lib) for lib in libraries), cache_dir=cache)


@pytest.mark.parametrize(("case", "tag"), [(c, t) for c in ("static_v1", "static_v3") for t in tags_for(c)])
def test_static_registrars_report_exactly_the_names_the_source_declares(plugins, cache, case, tag):
    """REGISTER_TENSORRT_PLUGIN registers in namespace "": a creator naming another is filed where no lookup goes."""
    (found,) = probe(cache, plugins / tag / f"lib{case}.so")
    assert found.outcome is PluginOutcome.REGISTERED, found.result
    assert found.major == built.TAGS[tag] and f"libnvinfer.so.{found.major}" in found.result.framework_version
    assert set(found.result.registered) == reported(case) and len(declared(case)) == 3
    assert [r.fate for r in found.registrations].count(Fate.UNREACHABLE) == 1


@pytest.mark.parametrize(("case", "tag"), [(c, t) for c in ("entry_v1", "entry_v3") for t in tags_for(c)])
def test_entry_points_are_read_after_the_logger_finder_but_a_dlopen_registers_nothing(plugins, cache, case, tag):
    """Triton's TensorRT backend dlopen()s plugins=; only IPluginRegistry::loadLibrary calls getCreators."""
    (found,) = probe(cache, plugins / tag / f"lib{case}.so")
    assert found.outcome is PluginOutcome.REGISTERED_NOTHING, found.result
    assert set(found.result.registered) == reported(case) and len(declared(case)) == 2
    assert "IPluginRegistry::loadLibrary" in found.result.message
    assert f"{case} found its logger" in found.result.output  # setLoggerFinder came first, its layout works


@pytest.mark.parametrize("tag", tags_for("duplicate_a"))
def test_the_same_name_from_two_libraries_is_refused_for_the_second(plugins, cache, tag):
    a, b = plugins / tag / "libduplicate_a.so", plugins / tag / "libduplicate_b.so"
    for first, second in ((a, b), (b, a)):
        won, lost = probe(cache, first, second)
        shared = declared("duplicate_a") & declared("duplicate_b")
        assert len(shared) == 1 and set(won.result.registered) == declared(first.stem[3:])
        refused = [r for r in lost.registrations if r.fate is Fate.REFUSED]
        assert [r.identity for r in refused] == sorted(shared)
        assert refused[0].other == str(first)
        accepted = {r.identity for r in lost.registrations if r.fate is Fate.FOUND}
        assert accepted == declared(second.stem[3:]) - shared


@pytest.mark.parametrize("tag", tags_for("namespaced_shared"))
def test_a_namespaced_creator_filed_under_the_same_name_takes_the_earlier_ones_place(plugins, cache, tag):
    earlier, later = probe(cache, plugins / tag / "libduplicate_a.so", plugins / tag / "libnamespaced_shared.so")
    (replacing,) = later.registrations
    assert set(earlier.result.registered) == reported("duplicate_a")
    assert replacing.fate is Fate.UNREACHABLE and replacing.filed_in == "" and replacing.other == earlier.result.library
    assert replacing.identity == "own_ns::FixtureShared/1" and "::FixtureShared/1" in declared("duplicate_a")


@pytest.mark.parametrize("tag", tags_for("nothing"))
def test_a_library_that_registers_nothing_is_not_a_pass(plugins, cache, tag):
    (found,) = probe(cache, plugins / tag / "libnothing.so")
    assert declared("nothing") == set()
    assert found.outcome is PluginOutcome.REGISTERED_NOTHING and found.result.status is ProbeStatus.LOADED
    assert found.result.registered == () and "registered no TensorRT plugin creator" in found.result.message


@pytest.mark.parametrize(("file", "tag", "major"), built.UNSUPPORTED)
def test_a_major_without_a_layout_is_unsupported(plugins, cache, file, tag, major):
    assert major not in tensorrt_standin.supported_majors()
    found, other = probe(cache, plugins / file, plugins / "v8.6.1" / "libstatic_v1.so")
    assert found.outcome is PluginOutcome.UNSUPPORTED and found.result.status is ProbeStatus.FAILED
    assert f"needs libnvinfer.so.{major}" in found.result.message and found.major == major
    assert other.outcome is PluginOutcome.UNSUPPORTED and str(plugins / file) in other.result.message
    assert other.result.status is ProbeStatus.NOT_LOADED


def test_the_layouts_are_the_majors_of_the_header_releases():
    assert set(tensorrt_standin.supported_majors()) == set(built.TAGS.values())


@pytest.mark.parametrize("tag", tags_for("stubs"))
def test_other_libnvinfer_names_are_stubbed_and_the_logger_works(plugins, cache, tag):
    (found,) = probe(cache, plugins / tag / "libstubs.so")
    assert found.outcome is PluginOutcome.REGISTERED, found.result
    assert set(found.result.registered) == reported("stubs") and "stubs says hello" in found.result.output


@pytest.mark.parametrize("tag", tags_for("needs_missing"))
def test_a_file_this_machine_lacks_gets_a_placeholder_with_its_versions(plugins, cache, tag):
    (found,) = probe(cache, plugins / tag / "libneeds_missing.so")
    assert found.outcome is PluginOutcome.REGISTERED, found.result
    assert set(found.result.registered) == reported("needs_missing")
    assert found.result.message == f"loaded with placeholders for {built.MISSING}, which this machine lacks"


def test_a_group_loads_against_the_first_major_only(plugins, cache):
    """One process holds one TensorRT: a library needing another major fails there, as it would."""
    first, second = probe(cache, plugins / "v11.1" / "libstatic_v1.so", plugins / "v8.6.1" / "libstatic_v1.so")
    assert first.outcome is PluginOutcome.REGISTERED and set(first.result.registered) == reported("static_v1")
    assert second.outcome is PluginOutcome.NOT_LOADED and "libnvinfer.so.8" in second.result.message


def test_without_a_compiler_the_probe_says_so_in_one_line(plugins, tmp_path, monkeypatch):
    monkeypatch.setattr(tensorrt_standin, "COMPILERS", ("customops-no-such-compiler",))
    (found,) = probe(tmp_path, plugins / "v11.1" / "libstatic_v1.so")
    assert found.outcome is PluginOutcome.UNAVAILABLE and found.result.status is ProbeStatus.UNAVAILABLE
    assert found.result.message.startswith("no C++ compiler") and "\n" not in found.result.message


def test_without_its_source_the_probe_says_so_in_one_line(plugins, tmp_path, monkeypatch):
    monkeypatch.setattr(tensorrt_standin, "SOURCE", tmp_path / "standin.cpp")
    (found,) = probe(tmp_path, plugins / "v11.1" / "libstatic_v1.so")
    assert found.outcome is PluginOutcome.UNAVAILABLE and found.result.message.endswith("standin.cpp is missing")


def test_the_stand_in_is_built_once_then_taken_from_the_cache(plugins, tmp_path, monkeypatch):
    library = plugins / "v10.7.0" / "libstatic_v1.so"
    assert probe(tmp_path, library)[0].outcome is PluginOutcome.REGISTERED
    assert len(list(tmp_path.glob("tensorrt-standin/*/libnvinfer.so.10"))) == 1
    monkeypatch.setattr(tensorrt_standin, "COMPILERS", ("customops-no-such-compiler",))
    assert set(probe(tmp_path, library)[0].result.registered) == reported("static_v1")


def test_probe_group_with_framework_tensorrt_is_the_stand_in(plugins, tmp_path, monkeypatch):
    monkeypatch.setenv("CUSTOMOPS_CACHE_DIR", str(tmp_path))
    (result,) = probe_group((str(plugins / "v11.1" / "libentry_v3.so"),), framework="tensorrt")
    assert result.status is ProbeStatus.LOADED and set(result.registered) == reported("entry_v3")


def test_the_command_lists_the_names_and_the_refusal(plugins, tmp_path):
    a, b = plugins / "v8.6.1" / "libduplicate_a.so", plugins / "v8.6.1" / "libduplicate_b.so"
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "customops", "probe", "--framework", "tensorrt", "--together",
                           str(a), str(b)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    (shared,) = declared("duplicate_a") & declared("duplicate_b")
    assert f"registered {shared}\n" in done.stdout
    assert f"registered {shared} [refused: already registered by {a}]" in done.stdout


@pytest.mark.parametrize("tag", tags_for("builtin"))
def test_the_built_in_plugins_come_after_the_libraries_and_lose_the_names_they_took(plugins, cache, tag):
    """TensorRT's own plugin library, initialized last as Triton's TensorRT backend does: a built-in whose name a
    library registered first is refused, the others are registered."""
    shadow, builtin = plugins / tag / "libshadow_builtin.so", plugins / tag / "libbuiltin.so"
    user, own = probe_plugins((str(shadow),), cache_dir=cache, builtin=str(builtin))
    shared = declared("builtin") & declared("shadow_builtin")
    assert len(shared) == 1 and set(user.result.registered) == declared("shadow_builtin")
    assert own.outcome is PluginOutcome.REGISTERED and own.result.library == str(builtin)
    assert {r.identity for r in own.registrations} == declared("builtin")
    assert {r.identity: r.other for r in own.registrations if r.fate is Fate.REFUSED} == {
        name: str(shadow) for name in shared}
    assert "builtin initialized" in own.result.output  # the stand-in's logger was handed to initLibNvInferPlugins


def test_a_built_in_library_without_initLibNvInferPlugins_says_so(plugins, cache):
    user, own = probe_plugins((str(plugins / "v10.7.0" / "libstatic_v1.so"),), cache_dir=cache,
                              builtin=str(plugins / "v10.7.0" / "libnothing.so"))
    assert set(user.result.registered) == reported("static_v1")
    assert own.result.status is ProbeStatus.FAILED and "does not export initLibNvInferPlugins" in own.result.message


def test_a_registered_name_cannot_forge_the_refusal_marker(plugins, cache):
    """What a library registers is its own text: brackets in it are reported as parentheses, so a name that
    reads "[refused: already registered by /innocent.so]" blames nobody."""
    (found,) = probe(cache, plugins / "v10.7.0" / "libforged.so")
    assert found.outcome is PluginOutcome.REGISTERED
    assert "::Forged (refused: already registered by /innocent.so)/1" in found.result.registered
    assert all(r.fate is Fate.FOUND for r in found.registrations)
