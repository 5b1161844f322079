"""The stand-in's registry against TensorRT's own: the fixture plugin libraries are loaded, as Triton's TensorRT
backend loads plugins= (dlopen, in order), once against customops' stand-in and once against TensorRT's real
registry (libnvinfer_dispatch.so.N from NVIDIA's tensorrt-dispatch-cu12-libs wheels, which needs no GPU:
fixtures/tensorrt_runtime.py), and what each registry took, found and lost must be the same.

The rules they show: the first creator filed under an identity wins; REGISTER_TENSORRT_PLUGIN files a creator
under namespace "", where getCreator finds it only if its own namespace is "" too; a creator filed where
another was takes its place; getCreators/getPluginCreators are not called by a dlopen.

Without the index the tests skip, with pip's reason; under CI, while the index lists the project, a missing
download fails them instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from customops.probe import tensorrt_standin
from customops.probe.tensorrt_registrations import Fate, Registration
from customops.probe.tensorrt_standin import PluginProbe, probe_plugins
from fixtures import tensorrt as built
from fixtures import tensorrt_runtime, wheels

pytestmark = [
    pytest.mark.skipif(not built.available(), reason=f"TensorRT's public headers are not under {built.HEADERS}"),
    pytest.mark.skipif(tensorrt_standin.compiler() is None, reason="no C++ compiler to build the stand-in"),
]
TAGS = [tag for tag, major in built.TAGS.items() if major in tensorrt_runtime.RELEASES]


@pytest.fixture(scope="module")
def plugins() -> Path:
    return built.build()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("standin-cache")


def real(major: int) -> tensorrt_runtime.Runtime:
    try:
        return tensorrt_runtime.runtime(major)
    except wheels.Unavailable as exc:
        if os.environ.get("CI") and wheels.index_answers(tensorrt_runtime.PROJECT):
            pytest.fail(f"the index lists {tensorrt_runtime.PROJECT}, but: {exc}")
        pytest.skip(str(exc))


def as_the_runner_writes(probes: tuple[PluginProbe, ...]) -> list[str]:
    """The stand-in's report in real_registry.cpp's words: per library the creators another one's registration
    made unreachable (a replaced creator that getCreator found), then the creators taken and whether found."""
    lines: list[str] = []
    earlier: list[Registration] = []
    for probe in probes:
        taken = [r for r in probe.registrations if r.registered]
        displaced = [f"DISPLACED {r.filed_in}::{r.name}/{r.version}" for r in taken if r.other and any(
            e.fate is Fate.FOUND and (e.namespace, e.name, e.version) == (r.filed_in, r.name, r.version)
            for e in earlier)]
        lines += [f"LIBRARY {probe.result.library}", *displaced,
                  *(f"REGISTERED {r.identity} {'found' if r.fate is Fate.FOUND else 'unreachable'}" for r in taken)]
        earlier += taken
    return lines


def by_library(lines: list[str]) -> list[list[str]]:
    """The lines of each library, its LIBRARY line first and the rest sorted (the probe reports names sorted)."""
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith("LIBRARY "):
            blocks.append([line])
        elif blocks:  # not the HELD lines before the first library
            blocks[-1].append(line)
    return [[block[0], *sorted(block[1:])] for block in blocks]


def compare(plugins: Path, cache: Path, tag: str, *cases: str) -> list[str]:
    libraries = tuple(plugins / tag / f"lib{case}.so" for case in cases)
    oracle = real(built.TAGS[tag]).load(*libraries)
    stand_in = as_the_runner_writes(probe_plugins(tuple(map(str, libraries)), cache_dir=cache))
    assert by_library(stand_in) == by_library(oracle)
    return oracle


@pytest.mark.parametrize("tag", TAGS)
def test_static_registrars_are_filed_under_the_empty_namespace(plugins, cache, tag):
    """static_v1 and static_v3 each declare one creator with a namespace of its own: taken, never found."""
    for case in ("static_v1", "static_v3"):
        oracle = compare(plugins, cache, tag, case)
        assert sum(line.endswith(" unreachable") for line in oracle) == 1
        assert sum(line.endswith(" found") for line in oracle) == 2


@pytest.mark.parametrize("tag", TAGS)
def test_the_first_library_to_register_an_identity_wins(plugins, cache, tag):
    oracle = compare(plugins, cache, tag, "duplicate_a", "duplicate_b")
    assert oracle.count("REGISTERED ::FixtureShared/1 found") == 1


@pytest.mark.parametrize("tag", TAGS)
def test_a_creator_filed_where_another_was_takes_its_place_and_neither_is_found(plugins, cache, tag):
    oracle = compare(plugins, cache, tag, "duplicate_a", "namespaced_shared")
    assert "DISPLACED ::FixtureShared/1" in oracle and "REGISTERED own_ns::FixtureShared/1 unreachable" in oracle


@pytest.mark.parametrize("tag", TAGS)
def test_an_unreachable_creator_still_refuses_the_identity_it_is_filed_under(plugins, cache, tag):
    oracle = compare(plugins, cache, tag, "namespaced_shared", "duplicate_a")
    assert "REGISTERED ::FixtureShared/1 found" not in oracle and "REGISTERED ::FixtureOnlyA/1 found" in oracle


@pytest.mark.parametrize("tag", TAGS)
def test_a_dlopen_does_not_call_the_entry_points(plugins, cache, tag):
    cases = [case for case in ("entry_v1", "entry_v3") if built.TAGS[tag] in dict(
        (c, m) for c, _, _, m in built.CASES)[case]]
    for case in cases:
        assert compare(plugins, cache, tag, case) == [f"LIBRARY {plugins / tag / f'lib{case}.so'}"]


def test_a_name_with_brackets_is_the_same_name_to_both(plugins, cache):
    """The stand-in reports brackets as parentheses; the runner's line is compared after the same change."""
    library = plugins / "v10.13.3" / "libforged.so"
    oracle = [line.replace("[", "(").replace("]", ")") for line in real(10).load(library)]
    assert by_library(as_the_runner_writes(probe_plugins((str(library),), cache_dir=cache))) == by_library(oracle)


SCENARIOS = (("static_v1",), ("static_v3",), ("duplicate_a", "duplicate_b"), ("duplicate_a", "namespaced_shared"),
             ("namespaced_shared", "duplicate_a"), ("entry_v3",), ("nothing",))


@pytest.mark.parametrize("tag", TAGS)
def test_a_containers_own_libnvinfer_answers_the_registrations_and_the_report_says_so(plugins, cache, tag):
    """Where the container's libnvinfer.so.N loads here, its registry answers and customops' only records."""
    runtime = real(built.TAGS[tag])
    registry = str(runtime.directory / f"libnvinfer.so.{runtime.major}")
    for cases in SCENARIOS:
        libraries = tuple(str(plugins / tag / f"lib{case}.so") for case in cases)
        modelled = probe_plugins(libraries, cache_dir=cache)
        answered = probe_plugins(libraries, cache_dir=cache, registry=registry)
        assert [p.result.registered for p in answered] == [p.result.registered for p in modelled]
        assert {p.result.framework_version for p in answered} == {
            f"TensorRT's own registry in {registry}, recorded by customops' stand-in for libnvinfer.so.{runtime.major}"}


def test_a_name_tensorrts_own_registry_already_holds_is_refused_by_it(plugins, cache):
    """TensorRT's lean runtime holds creators of its own before any library: libraries registering one of those
    names are refused by the real registry (which the stand-in alone cannot know), every one of them by it."""
    try:
        lean = tensorrt_runtime.runtime(10, lean=True)
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    held = next(line[5:] for line in lean.load() if line.startswith("HELD ::") and line.endswith("/1"))
    name = held[2:-2]
    libraries = []
    for file in (f"lean/lib{name}.so", f"lean/lib{name}_again.so"):
        if not (plugins / file).exists():
            built.compile_plugin(plugins, file, "v10.13.3", "duplicate.cpp", (f'FIXTURE_OWN="{name}"',), 10)
        libraries.append(str(plugins / file))
    registry = str(lean.directory / "libnvinfer.so.10")
    (alone,) = probe_plugins(tuple(libraries[:1]), cache_dir=cache)
    answered = probe_plugins(tuple(libraries), cache_dir=cache, registry=registry)
    assert f"{held}" in alone.result.registered
    for probe in answered:
        assert f"{held} [refused: already registered by {registry}]" in probe.result.registered
    assert by_library(as_the_runner_writes(answered)) == by_library(lean.load(*map(Path, libraries)))


def test_the_entry_points_of_tensorrts_own_plugin_library_are_what_its_loadLibrary_registers(cache):
    """libnvinfer_vc_plugin.so.10, published in TensorRT's lean runtime wheel, exports only setLoggerFinder and
    getCreators: the stand-in reads its creators (not registered by a dlopen), and the real registry's
    loadLibrary registers exactly those."""
    try:
        lean = tensorrt_runtime.runtime(10, lean=True)
        (library,) = wheels.extract(tensorrt_runtime.LEAN[0], tensorrt_runtime.RELEASES[10][0],
                                    ("tensorrt_lean_libs/libnvinfer_vc_plugin.so.10",)).values()
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    (found,) = probe_plugins((str(library),), cache_dir=cache)
    assert found.registrations and all(r.fate is Fate.ENTRY_POINT for r in found.registrations)
    registered = [line for line in lean.load(Path(f"loadLibrary:{library}")) if line.startswith("REGISTERED")]
    assert sorted(registered) == sorted(f"REGISTERED {r.identity} found" for r in found.registrations)
