"""CO406 for a Torch op library whose registrations run twice (one library preloaded from two model directories,
or two builds of it), against the real torch of two containers: torch 2.13.0 (the installed CPU build) and torch
2.14.1 (its PyPI wheel's libtorch, as test_probe_framework_versions lays it out), each loading the published
stable-ABI libraries exactly as the server does, LD_PRELOAD before a program's start.

What was measured (the libraries copied to two paths, loaded with torch.ops.load_library, ctypes.CDLL with
RTLD_GLOBAL after libtorch_cpu.so, or LD_PRELOAD; torch 2.11.0, 2.12.0, 2.13.0, 2.14.1 and 2.15.0 alike):
- torchaudio 2.11.0's libtorchaudio.abi3.so (STABLE_TORCH_LIBRARY_FRAGMENT and _IMPL blocks, built with torch
  2.11's headers, whose StableLibrary::def ignores the shim's error code): torch refuses each schema the second
  time and the load goes on; the second copy's kernels replace the first's, torch warns "Overriding a previously
  registered kernel for the same operator and the same dispatch key" (torch 2.11 and 2.12 also log "Exception in
  aoti_torch: Tried to register an operator ..." for each schema), and the ops work. Exit status 0.
- torchaudio 2.11.1's libtorchaudio.so (the same blocks, built with torch 2.13's headers: def() checks the error
  code and throws): the second copy aborts ("Tried to register an operator ... with the same name and overload
  name multiple times"), SIGABRT. It does not load in torch 2.11 or 2.12 at all (it needs
  torch_exception_get_what_without_backtrace).
- torchaudio 2.11.0's _torchaudio.abi3.so (STABLE_TORCH_LIBRARY): torch refuses the namespace, the handle stays
  null and the first def() crashes, SIGSEGV, whatever the headers (no StableLibrary checks its constructor).
- Two builds: 2.11.1's library after 2.11.0's aborts; 2.11.0's after 2.11.1's loads, its kernels replacing the
  first's. What decides is the library loaded second, not the container's torch: customops reads it from the
  library (its .symtab blocks, and whether the text of torch's error-code check around def() is in its read-only
  data).
The PyPI builds need CUDA libraries; stubs generated from the libraries stand in for them in each container's
PyTorch backend directory (fixtures/published_torch.py). The wheels come from pip (cached under
~/.cache/customops-wheels/); without the index the tests skip and say so.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from customops.app.check import run_check
from customops.codes import Severity
from customops.elf.cache import ElfReader
from customops.findings import Finding
from customops.inspect.files import readonly_strings
from customops.inspect.registrations import STABLE_DEF_TEXT, RefusedDef, refused_def
from customops.probe.groups import ProbeSettings
from customops.rules.registrations import OVERRIDDEN
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import published_torch as published
from fixtures import real_container, wheels
from fixtures.build import DEFAULT_OUT

pytestmark = pytest.mark.frameworks
PYTORCH = "opt/tritonserver/backends/pytorch"
OTHER_TORCH = "2.14.1"  # a container of another torch than the installed one (its PyPI wheel)
IGNORING, CHECKING = "2.11.0", "2.11.1"  # torchaudio built with torch 2.11's headers, and with 2.13's
SCHEMAS = "torchaudio/lib/libtorchaudio.abi3.so"  # STABLE_TORCH_LIBRARY_FRAGMENT(torchaudio) and _IMPL blocks
NAMESPACE = "torchaudio/lib/_torchaudio.abi3.so"  # STABLE_TORCH_LIBRARY(_torchaudio)
CHECKED = "torchaudio/lib/libtorchaudio.so"
REFUSED = "with the same name and overload name multiple times"
LFILTER = ("torch.ops.torchaudio._lfilter_core_loop(torch.ones(1, 1, 5), torch.tensor([[0.0, 1.0]]), "
           "torch.zeros(1, 1, 6))")


def extracted(version: str, member: str) -> Path:
    try:
        return next(iter(wheels.extract("torchaudio", version, (member,)).values()))
    except wheels.Unavailable as exc:
        pytest.skip(f"no torchaudio {version} wheel: {exc}")


@pytest.fixture(scope="module")
def libraries() -> dict[str, Path]:
    return {"ignoring": extracted(IGNORING, SCHEMAS), "namespace": extracted(IGNORING, NAMESPACE),
            "checking": extracted(CHECKING, CHECKED)}


def provided(name: str) -> bool:
    """Whether the C toolchain's own library directories hold `name` (librt.so.1, say): no stub for it."""
    found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return os.path.isabs(found) and os.path.exists(found)


def with_stubs(root: Path, libraries: dict[str, Path]) -> Path:
    """The container root, stubs in its PyTorch backend directory for the CUDA libraries that the op libraries
    and the container's own libtorch need and the container lacks (the CPU-less machine has no CUDA)."""
    pytorch = root / PYTORCH
    framework = [pytorch / "libtorch_cpu.so", pytorch / "libtorch.so"]
    try:
        stubs = published.cuda_stubs([*libraries.values(), *framework], pytorch, DEFAULT_OUT)
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    for stub in stubs.iterdir():
        if not provided(stub.name):
            real_container.place(stub, pytorch / stub.name)
    return root


@pytest.fixture(scope="module", params=["installed", OTHER_TORCH])
def root(request, tree: Path, libraries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A container root whose PyTorch backend is the installed torch, or torch 2.14.1's wheel."""
    built = tmp_path_factory.mktemp("torch") / "root"
    try:
        if request.param == "installed":
            real_container.assemble(tree, built)
        else:
            chosen = tmp_path_factory.mktemp("wheels")
            (chosen / f"torch-{OTHER_TORCH}.whl").symlink_to(wheels.wheel("torch", OTHER_TORCH))
            real_container.assemble_with_wheels(tree, built, chosen)
            assert from_root(str(built)).facts.pytorch == OTHER_TORCH
    except LookupError as exc:  # wheels.Unavailable too
        pytest.skip(str(exc))
    return with_stubs(built, libraries)


def repository(root: Path, first: Path, second: Path) -> Path:
    """Two PyTorch models, a and b, each with its own copy of an op library (ops/<name>), both preloaded
    ([pytorch] ops)."""
    repo = root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    for model, library in (("a", first), ("b", second)):
        (repo / model / "1").mkdir(parents=True)
        (repo / model / "config.pbtxt").write_text('backend: "pytorch"\n')
        (repo / model / "ops").mkdir()
        shutil.copy2(library, repo / model / "ops" / library.name)
    (repo / "customops.toml").write_text(f'[pytorch]\nops = ["a/ops/{first.name}", "b/ops/{second.name}"]\n')
    return repo


def check(root: Path, first: Path, second: Path, probe: ProbeSettings | None = None) -> tuple[Path, list[Finding]]:
    repo = repository(root, first, second)
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(root)), (),
                       probe=probe)
    return repo, list(result.findings)


def preloaded(root: Path, repo: Path, first: Path, second: Path) -> subprocess.CompletedProcess[str]:
    """The real thing, as the server starts: both copies in LD_PRELOAD, the container's PyTorch backend directory
    (its libtorch and the stubs) on the library path, a program that does nothing else."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(root / PYTORCH),
           "LD_PRELOAD": f"{repo / 'a/ops' / first.name} {repo / 'b/ops' / second.name}"}
    return subprocess.run([shutil.which("true") or "/bin/true"], capture_output=True, text=True, env=env, timeout=120)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == Severity.ERROR]


def co406(findings: list[Finding]) -> Finding:
    (finding,) = [f for f in findings if f.code == "CO406"]
    return finding


@pytest.mark.parametrize("strip", [False, True], ids=["with-symtab", "stripped"])
def test_what_a_library_does_with_a_refused_schema_is_read_from_its_strings(libraries, tmp_path, strip):
    """2.11.1's libtorchaudio.so holds the text of torch's check around def() ("aoti_torch_library_def(lib_,
    schema)"), 2.11.0's libraries do not; stripping keeps it (read-only data)."""
    def read(path: Path) -> RefusedDef | None:
        if strip:
            try:
                path = published.stripped(path, tmp_path / path.parent.parent.parent.name)
            except wheels.Unavailable as exc:
                pytest.skip(str(exc))
        return refused_def(ElfReader(use_cache=False).read(str(path)), readonly_strings(str(path), STABLE_DEF_TEXT))

    assert read(libraries["checking"]) == RefusedDef.THROWS
    assert read(libraries["ignoring"]) == read(libraries["namespace"]) == RefusedDef.IGNORED


def test_a_stable_op_library_that_ignores_refused_schemas_loads_twice_with_a_warning(root, libraries):
    library = libraries["ignoring"]
    repo, findings = check(root, library, library)
    finding = co406(findings)
    assert finding.severity == Severity.INFO and finding.library == f"/models/b/ops/{library.name}"
    assert finding.predicted == OVERRIDDEN and "the server loads" in finding.message
    assert not errors(findings), errors(findings)
    real = preloaded(root, repo, library, library)
    assert real.returncode == 0, (real.returncode, real.stderr[-2000:])
    assert OVERRIDDEN in real.stderr and REFUSED not in real.stderr


def test_the_ops_of_a_stable_op_library_loaded_twice_work(libraries, tmp_path):
    """The installed torch's Python API on two copies (torch.ops.load_library): the second copy's kernels run."""
    torch = real_container.package("torch")
    if torch is None:
        pytest.skip("torch is not installed")
    try:
        stubs = published.cuda_stubs(list(libraries.values()), torch / "lib", DEFAULT_OUT)
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    library = libraries["ignoring"]
    repo = repository(tmp_path, library, library)
    code = "".join(f"torch.ops.load_library({str(repo / m / 'ops' / library.name)!r})\n" for m in "ab")
    code = f"import torch\n{code}print({LFILTER}.tolist())\n"
    real = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LD_LIBRARY_PATH": str(stubs)})
    assert real.returncode == 0, real.stderr[-2000:]
    assert real.stdout.strip() == "[[[0.0, 1.0, 1.0, 1.0, 1.0, 1.0]]]" and OVERRIDDEN in real.stderr


def test_a_stable_op_library_that_checks_refused_schemas_aborts_when_loaded_twice(root, libraries):
    library = libraries["checking"]
    repo, findings = check(root, library, library)
    finding = co406(findings)
    assert finding.severity == Severity.ERROR and finding.predicted == REFUSED
    assert errors(findings) == [finding]
    assert any("checks the shim's error code" in e for e in finding.evidence), finding.evidence
    real = preloaded(root, repo, library, library)
    assert real.returncode == -signal.SIGABRT, (real.returncode, real.stderr[-2000:])
    assert finding.predicted in real.stderr


def test_a_second_stable_torch_library_namespace_crashes_whatever_the_build(root, libraries):
    """Its def() ignores refusals too, but the refused namespace leaves it no handle to call them on."""
    library = libraries["namespace"]
    repo, findings = check(root, library, library)
    finding = co406(findings)
    assert finding.severity == Severity.ERROR and "SIGSEGV" in finding.message
    real = preloaded(root, repo, library, library)
    assert real.returncode == -signal.SIGSEGV, (real.returncode, real.stderr[-2000:])


@pytest.mark.parametrize("listed", ["ignoring-first", "checking-first"])
def test_another_build_defining_the_same_schemas_loads_only_if_it_ignores_the_refusal(root, libraries, listed):
    """What decides is the build that registers second, which under LD_PRELOAD is the one listed first (ld.so
    runs independent preloads' initialisers last listed first): 2.11.0's after 2.11.1's loads, its kernels
    taking the first's place (a warning: another build's code runs under the first's schemas); 2.11.1's after
    2.11.0's aborts."""
    ignoring, checking = libraries["ignoring"], libraries["checking"]
    first, second = (ignoring, checking) if listed == "ignoring-first" else (checking, ignoring)
    repo, findings = check(root, first, second)
    finding = co406(findings)
    assert finding.library == f"/models/a/ops/{first.name}"  # registers after b's
    assert any("LD_PRELOAD: the last listed first" in e for e in finding.evidence), finding.evidence
    real = preloaded(root, repo, first, second)
    if listed == "ignoring-first":
        assert finding.severity == Severity.WARNING and finding.predicted == OVERRIDDEN
        assert not errors(findings), errors(findings)
        assert real.returncode == 0, (real.returncode, real.stderr[-2000:])
    else:
        assert finding.severity == Severity.ERROR and finding.predicted == REFUSED
        assert real.returncode == -signal.SIGABRT, (real.returncode, real.stderr[-2000:])
    assert finding.predicted in real.stderr


def test_a_stripped_stable_op_library_that_ignores_refused_schemas_says_what_its_fate_depends_on(root, libraries,
                                                                                                tmp_path):
    """Without .symtab its blocks are not readable (its imports allow STABLE_TORCH_LIBRARY): the conservative
    verdict stands, its message naming both outcomes; this one has no namespace block and really loads."""
    try:
        library = published.stripped(libraries["ignoring"], tmp_path)
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    repo, findings = check(root, library, library)
    finding = co406(findings)
    assert finding.severity == Severity.ERROR
    assert "crashes the server (SIGSEGV)" in finding.message and "the server loads" in finding.message
    assert any("does not check the shim's error code" in e for e in finding.evidence), finding.evidence
    assert preloaded(root, repo, library, library).returncode == 0
