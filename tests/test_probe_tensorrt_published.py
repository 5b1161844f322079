"""The TensorRT probe on real published plugin libraries, downloaded once by pip (fixtures/wheels.py): what it
lists for each is compared with what the project's published sources declare.

Neither project publishes its C++ sources on the package index: PyPI holds no sdist of mmdeploy 1.3.1 (its only
sdist is 0.2.0) nor of torch-tensorrt 2.9.0 or 2.14.0 (its only one is the placeholder 0.0.0.post1). The names
below are therefore the constants of each project's sources at the release (cited where they are used), and
what the wheels do publish is read as well: torch-tensorrt's wheel carries its plugin headers, which say the
namespace every creator is registered in and which creator classes there are.

Without the index (or the wheel) the tests skip, with pip's reason; under CI, while the index lists the
project, a missing download fails them instead."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from customops.probe import tensorrt_standin
from customops.probe.results import ProbeStatus
from customops.probe.tensorrt_registrations import Fate
from customops.probe.tensorrt_standin import PluginOutcome, PluginProbe, probe_plugins
from fixtures import wheels

pytestmark = pytest.mark.skipif(tensorrt_standin.compiler() is None, reason="no C++ compiler to build the stand-in")

# mmdeploy 1.3.1's TensorRT 8 plugin library: the PLUGIN_NAME / NMS_PLUGIN_NAME constants (PLUGIN_VERSION "1") of
# its sources, csrc/mmdeploy/backend_ops/tensorrt/*/*.cpp, each creator registered with REGISTER_TENSORRT_PLUGIN and
# no namespace. Its ScatterND is left out: trt_scatternd.cpp is compiled only `#if NV_TENSORRT_MAJOR <= 7`.
MMDEPLOY_PLUGINS = {"GatherTopk", "GridPriorsTRT", "MMCVDeformConv2d", "MMCVModulatedDeformConv2d",
                    "MMCVMultiLevelRoiAlign", "MMCVMultiLevelRotatedRoiAlign", "MMCVMultiScaleDeformableAttention",
                    "MMCVRoiAlign", "ScaledDotProductAttentionTRT", "TRTBatchedNMS", "TRTBatchedRotatedNMS",
                    "TRTBicubicInterpolate", "TRTInstanceNormalization", "grid_sampler"}

# torch-tensorrt's libtorchtrt_plugins.so: what each creator's getPluginName and getPluginVersion return in
# core/plugins/impl/*_plugin.cpp (github.com/pytorch/TensorRT, tag v2.9.0; for 2.14.0 the same files, which add
# scatter_add_plugin.cpp), registered by the REGISTER_TORCHTRT_PLUGIN* registrars of core/plugins/plugins.h.
# core/plugins/register_plugins.cpp registers no creator of its own: it initializes TensorRT's built-in plugins
# and logs every creator the registry holds, from a static initializer, while the library loads.
TORCH_TENSORRT = {  # version: (the libnvinfer major its wheel needs, {name: version})
    "2.9.0": (10, {"Interpolate": "1", "NormalizePlugin": "1"}),
    "2.14.0": (11, {"Interpolate": "1", "NormalizePlugin": "1", "ScatterAdd": "1"}),
}
TORCH_TENSORRT_HEADERS = "torch_tensorrt/include/torch_tensorrt/core/plugins/"
REGISTERED_IN = re.compile(r'registerCreator\(\s*\w+\s*,\s*"([^"]*)"\s*\)')  # plugins.h's registrars
CREATOR_CLASS = re.compile(r"^class (\w+)PluginCreator\b", re.MULTILINE)  # impl/*_plugin.h's creators


def published(project: str, version: str, members: tuple[str, ...], under: str = "") -> dict[str, Path]:
    """The wheel's members (and every file under the folder `under`), extracted, by base name; a skip without
    the download, a failure under CI while the index answers."""
    try:
        return wheels.extract(project, version, (*members, *(wheels.listing(project, version, under) if under else ())))
    except wheels.Unavailable as exc:
        if os.environ.get("CI") and wheels.index_answers(project):
            pytest.fail(f"the index lists {project}, but: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One stand-in cache for the module: a library probed twice is built for once."""
    return tmp_path_factory.mktemp("standin-cache")


def probe(cache: Path, library: Path) -> PluginProbe:
    (found,) = probe_plugins((str(library),), cache_dir=cache)
    return found


def test_mmdeploy_lists_the_names_its_sources_declare(cache):
    """It needs libnvinfer.so.8 and, beside it, libnvinfer_plugin.so.8, cuBLAS, cuDNN and the CUDA runtime,
    which this machine lacks: placeholders stand in for them."""
    (library,) = published("mmdeploy", "1.3.1", ("mmdeploy/lib/libmmdeploy_tensorrt_ops.so",)).values()
    found = probe(cache, library)
    assert found.outcome is PluginOutcome.REGISTERED and found.major == 8, found.result
    assert set(found.result.registered) == {f"::{name}/1" for name in MMDEPLOY_PLUGINS}
    assert "placeholders for" in found.result.message and "libnvinfer_plugin.so.8" in found.result.message


@pytest.mark.parametrize("version", sorted(TORCH_TENSORRT))
def test_torch_tensorrt_lists_the_names_its_sources_declare(cache, version):
    """libtorchtrt_plugins.so needs libtorch (libc10.so, libtorch_cpu.so, ...) besides TensorRT's libraries:
    placeholders stand in for them, and its static initializer, which builds and logs std::strings, runs
    against the machine's own C++ runtime (never against the stubs, which a library that leaves members of
    std::string undefined would otherwise put before it)."""
    major, names = TORCH_TENSORRT[version]
    files = published("torch-tensorrt", version, ("torch_tensorrt/lib/libtorchtrt_plugins.so",))
    found = probe(cache, files["libtorchtrt_plugins.so"])
    assert found.outcome is PluginOutcome.REGISTERED and found.major == major, found.result
    assert set(found.result.registered) == {f"torch_tensorrt::{name}/{v}" for name, v in names.items()}
    assert all(r.fate is Fate.FOUND for r in found.registrations)  # registered in the creators' own namespace
    assert "placeholders for" in found.result.message and "libc10.so" in found.result.message


@pytest.mark.parametrize("version", sorted(TORCH_TENSORRT))
def test_torch_tensorrt_registers_what_its_published_headers_declare(cache, version):
    """The wheel's own headers: the namespace plugins.h's registrars pass to registerCreator, and one
    registration per creator class of impl/*_plugin.h, whose name the class is named after."""
    files = published("torch-tensorrt", version, ("torch_tensorrt/lib/libtorchtrt_plugins.so",), TORCH_TENSORRT_HEADERS)
    namespaces = set(REGISTERED_IN.findall(files["plugins.h"].read_text()))
    classes = {c for name, path in files.items() if name.endswith("_plugin.h")
               for c in CREATOR_CLASS.findall(path.read_text())}
    found = probe(cache, files["libtorchtrt_plugins.so"])
    assert namespaces == {"torch_tensorrt"} and len(classes) == len(TORCH_TENSORRT[version][1])
    assert {r.namespace for r in found.registrations} == namespaces
    assert len(found.registrations) == len(classes)
    assert all(any(r.name.startswith(c) for r in found.registrations) for c in classes), classes


# A plugin library that leaves a member of std::string undefined and unversioned (as torch-tensorrt's are: so a
# stub is built for it) and whose static initializer has the C++ runtime do work that calls that member inside
# the runtime: std::string's _M_replace growing a string past its in-place buffer calls _M_mutate.
GROWS_A_STRING = r"""
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
extern void customops_mutate(void) __asm__("_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_mutateEmmPKcm");
void* volatile customops_keep = (void*)&customops_mutate;
struct text { char* data; size_t size; char local[16]; };
typedef struct text* (*replace)(struct text*, size_t, size_t, const char*, size_t);
__attribute__((constructor)) static void grow(void) {
    static const char longer[] = "longer than the sixteen bytes a string keeps in place";
    void* runtime = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);
    replace call = runtime == 0 ? 0 : (replace)dlsym(runtime,
        "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE10_M_replaceEmmPKcm");
    struct text t = {t.local, 0, {0}};
    if (call == 0) abort();
    call(&t, 0, 0, longer, sizeof longer - 1);
    if (t.data == t.local || memcmp(t.data, longer, sizeof longer - 1) != 0) abort();
}
"""


def test_the_stubs_never_stand_in_for_the_c_plus_plus_runtimes_own_calls(cache, tmp_path):
    """The stand-in loads the C++ runtime first, and the runtime looks its own names up in the stand-in's scope:
    were the stubs before it there, the _M_mutate stub would answer the runtime's own call, and the string
    would not grow (torch-tensorrt 2.9.0's static initializer crashed so). Linked against libraries of the
    right SONAMEs that define nothing, the reference stays unversioned."""
    compiler = tensorrt_standin.compiler()
    (tmp_path / "grows.c").write_text(GROWS_A_STRING)
    for soname in ("libnvinfer.so.10", "libstdc++.so.6"):
        subprocess.run([compiler, "-x", "c", "-shared", "-fPIC", "/dev/null", f"-Wl,-soname,{soname}", "-nodefaultlibs",
                        "-o", str(tmp_path / soname)], check=True, capture_output=True)
    library = tmp_path / "libgrows.so"
    subprocess.run([compiler, "-x", "c", "-shared", "-fPIC", "-nodefaultlibs", str(tmp_path / "grows.c"),
                    "-Wl,--no-as-needed", f"-L{tmp_path}", "-l:libnvinfer.so.10", "-l:libstdc++.so.6", "-lc", "-o",
                    str(library)], check=True, capture_output=True)
    for soname in ("libnvinfer.so.10", "libstdc++.so.6"):
        (tmp_path / soname).unlink()  # the machine's own libstdc++.so.6 and the stand-in are what it loads with
    found = probe(cache, library)
    assert found.outcome is PluginOutcome.REGISTERED_NOTHING and found.major == 10, found.result


def test_a_name_an_indirect_dependency_defines_gets_no_stub(cache, tmp_path):
    """ld.so's breadth-first scope puts the stand-in's stubs (a dependency of libnvinfer.so.N, a direct need)
    before a dependency of a dependency: a stub for a name that one defines would answer instead of it. So no
    stub is built for a name anything in the library's load scope defines (customops.probe.tensorrt_scope):
    the library's constructor gets the real 42, not a stub's 0."""
    compiler = tensorrt_standin.compiler()
    sources = {"inner.c": "int customops_inner_value(void) { return 42; }\n",
               "dep.c": "int customops_dep_marker(void) { return 1; }\n",
               "plugin.c": "#include <stdlib.h>\nint customops_inner_value(void);\n"
                           "__attribute__((constructor)) static void check(void) {\n"
                           "    if (customops_inner_value() != 42) abort();\n}\n"}
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    build = [compiler, "-x", "c", "-shared", "-fPIC"]
    subprocess.run([*build, "/dev/null", "-Wl,-soname,libnvinfer.so.10", "-o", str(tmp_path / "libnvinfer.so.10")],
                   check=True, capture_output=True)
    subprocess.run([*build, str(tmp_path / "inner.c"), "-Wl,-soname,libinner.so", "-o", str(tmp_path / "libinner.so")],
                   check=True, capture_output=True)
    subprocess.run([*build, str(tmp_path / "dep.c"), "-Wl,-soname,libdep.so", "-Wl,--no-as-needed", f"-L{tmp_path}",
                    "-l:libinner.so", "-Wl,-rpath,$ORIGIN", "-o", str(tmp_path / "libdep.so")],
                   check=True, capture_output=True)
    library = tmp_path / "libplugin.so"
    subprocess.run([*build, str(tmp_path / "plugin.c"), "-Wl,--no-as-needed", f"-L{tmp_path}", "-l:libnvinfer.so.10",
                    "-l:libdep.so", "-Wl,--allow-shlib-undefined", "-Wl,-rpath,$ORIGIN", "-o", str(library)],
                   check=True, capture_output=True)
    (tmp_path / "libnvinfer.so.10").unlink()  # the stand-in is what it loads with
    found = probe(cache, library)
    assert found.outcome is PluginOutcome.REGISTERED_NOTHING and found.result.status is ProbeStatus.LOADED, \
        found.result
