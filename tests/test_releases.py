"""The release table (issue #32): every monthly Triton container release from 23.01 to the newest published, each
value with the source that states it (a release branch's server build.py, a line of NVIDIA's release notes), what
no source states listed as unknown. The table is what scripts/releases.py makes of the cited text kept under
tests/data/releases/; it agrees with itself (versions grow with the months); the facts of five releases stand in
their cited text; and each rule that derives a fact from a version (glibc and GLIBCXX from Ubuntu's packages,
libpython and libcudart from a version) agrees with a real library of that version."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from customops.elf.cache import ElfReader
from customops.triton.container import _definition_maxima
from customops.triton.releases import Release, _gcc_at_or_below, _upstream, months, release, releases
from fixtures import wheels

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "data" / "releases"
COLUMNS = ("server", "ubuntu", "python", "libpython3_dev", "cuda", "cublas", "cudnn", "nccl", "tensorrt", "onnxruntime",
           "openvino", "pytorch", "tensorflow", "tensorflow_backend", "dali")
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")


def numbers(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def test_the_table_is_what_its_cited_sources_give():
    made = subprocess.run([sys.executable, str(ROOT / "scripts" / "releases.py"), "--check"], capture_output=True,
                          text=True)
    assert made.returncode == 0, made.stderr


def test_every_month_from_23_01_to_the_newest_release_is_a_row():
    names = [r.name for r in releases()]
    assert names[0] == "23.01" and [months(n) for n in names] == list(range(months("23.01"), months(names[-1]) + 1))


def test_each_value_names_its_source_and_the_rest_is_unknown():
    for row in releases():
        assert set(row.values) == set(row.sources) and not set(row.values) & set(row.unknown), row.name
        assert set(row.values) | set(row.unknown) == set(COLUMNS), row.name
        assert all(url.startswith("https://") and quote for url, quote in row.sources.values()), row.name


def known(column: str) -> list[Release]:
    return [r for r in releases() if column in r.values]


@pytest.mark.parametrize("column", ["server", "ubuntu", "cuda", "onnxruntime", "openvino"])
def test_versions_only_grow_with_the_releases(column):
    found = [numbers(str(r.values[column]))[:2 if column == "cuda" else None] for r in known(column)]
    assert found == sorted(found), column  # CUDA as major.minor: the notes give 12.4 and 12.4.0.41 alike
    if column == "server":  # one server a release: 25.07 shipped 2.59.1 between 25.06's 2.59.0 and 25.08's 2.60.0
        assert len(set(found)) == len(found)


def test_the_tensorflow_backend_once_dropped_never_returns():
    shipped = [r.values["tensorflow_backend"] for r in known("tensorflow_backend")]
    assert shipped == sorted(shipped, reverse=True) and shipped[0] and not shipped[-1]
    assert next(r.name for r in known("tensorflow_backend") if not r.values["tensorflow_backend"]) == "25.03"


@pytest.mark.parametrize("name", ["23.01", "24.05", "24.12", "25.08", "26.07"])
def test_a_releases_facts_stand_in_their_cited_text(name):
    """Each value is in the line its source is cited by, and that line is in the text kept from that source: the
    release branch's build.py (whose version map names the release), or the release notes' line."""
    row = release(name)
    assert row is not None
    kept = (SOURCES / "build-py" / f"{name}.txt").read_text()
    cited = {(c, v): (u, q) for r, c, v, u, q in (line.split("\t") for line in
                                                  (SOURCES / "cited.tsv").read_text().splitlines()
                                                  if line and not line.startswith("#")) if r == name}
    assert f"/blob/r{name}/build.py" in kept.splitlines()[0] and f'"{name}"' in kept.replace("'", '"')
    for column, value in row.values.items():
        url, quote = row.sources[column]
        if isinstance(value, bool):
            stated = "def tensorflow_cmake_args(" if column == "tensorflow_backend" else "libpython3-dev"
            assert value == (quote in kept and quote.startswith(stated)), (column, quote)
        elif url.endswith(f"/r{name}/build.py"):  # Ubuntu as the keyring's repository names it: ubuntu2404
            assert str(value).replace(".", "" if column == "ubuntu" else ".") in quote and quote in kept, quote
        else:
            assert cited[(column, value)] == (url, quote) and str(value) in quote, (column, quote)


def package_version(package: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.skipif(not (LIBDIR / "libc.so.6").exists(), reason="needs a Debian or Ubuntu libc6")
def test_a_libc6_packages_version_names_its_newest_glibc_symbol_version():
    """The rule the table's glibc column follows (Ubuntu 24.04's libc6 2.39-0ubuntu8 -> GLIBC_2.39), held against
    this machine's libc6 package and its libc.so.6."""
    glibc = _upstream(package_version("libc6"))
    assert _definition_maxima(ElfReader(), str(LIBDIR / "libc.so.6"))["GLIBC"] == f"GLIBC_{glibc}"


@pytest.mark.skipif(not (LIBDIR / "libstdc++.so.6").exists(), reason="needs a Debian or Ubuntu libstdc++6")
def test_a_libstdcxx_packages_gcc_names_its_newest_glibcxx_and_cxxabi():
    """The rule the table's libstdc++ columns follow (the GCC the libstdc++6 package comes from, read in GCC's own
    ABI list), held against this machine's libstdc++6 package and its libstdc++.so.6."""
    gcc = _gcc_at_or_below(_upstream(package_version("libstdc++6")) or "")
    maxima = _definition_maxima(ElfReader(), str(LIBDIR / "libstdc++.so.6"))
    assert gcc is not None and (maxima["GLIBCXX"], maxima["CXXABI"]) == (gcc["glibcxx"], gcc["cxxabi"])


def test_a_python_versions_library_is_libpython_major_minor():
    """The Python backend's stub links libpython<major.minor>.so.1.0: the SONAME of this interpreter's library."""
    import sysconfig

    name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
    library = Path(sysconfig.get_config_var("LIBDIR") or "") / name  # the library itself, not -dev's symlink
    if ".so" not in library.name or not library.is_file():
        pytest.skip(f"this Python's shared libpython is not installed here ({library})")
    soname = ElfReader().read(str(library)).soname
    assert soname == f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"


@pytest.mark.parametrize(("project", "version", "cuda"), [("nvidia-cuda-runtime-cu12", "12.9.79", "12.9.1"),
                                                           ("nvidia-cuda-runtime", "13.0.96", "13.0.2")])
def test_a_cuda_versions_runtime_is_libcudart_of_its_major(project, version, cuda, tmp_path):
    """CUDA 12.x and 13.x runtimes as NVIDIA publishes them: each library's SONAME is the table's derivation for a
    release on that CUDA."""
    try:
        path = wheels.wheel(project, version)
    except wheels.Unavailable as exc:
        pytest.skip(f"{exc} (is the package index reachable?)")
    with zipfile.ZipFile(path) as archive:
        member = next(n for n in archive.namelist() if re.search(r"/libcudart\.so\.\d+$", n))
        (tmp_path / "libcudart").write_bytes(archive.read(member))
    on = next(r for r in releases() if str(r.values.get("cuda", "")).startswith(cuda.rsplit(".", 1)[0]))
    assert ElfReader().read(str(tmp_path / "libcudart")).soname == on.derived()["libcudart"]


def customops(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_releases_lists_every_release_and_one_with_its_sources():
    listed = customops("releases")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == len(releases()) + 2
    one = customops("releases", "25.08")
    assert one.returncode == 0 and "cuda: 13.0.0.044" in one.stdout and "rel-25-08.html" in one.stdout
    assert "libcudart: libcudart.so.13" in one.stdout and "unknown (no cited source states it):" in one.stdout
    data = json.loads(customops("releases", "--format", "json").stdout)
    assert data["schema"] == "customops.releases/1" and len(data["releases"]) == len(releases())


def test_an_unknown_release_and_one_known_too_little_are_one_line_each():
    unknown = customops("releases", "19.01")
    assert unknown.returncode == 2 and len(unknown.stderr.splitlines()) == 1
    little = customops("check", str(ROOT / "examples" / "model_repository"), "--triton-release",
                       releases()[-1].name)
    assert little.returncode == 2 and "knows too little of it" in little.stderr
    assert len(little.stderr.splitlines()) == 1
