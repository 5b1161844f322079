"""Published Torch op libraries (torchaudio 2.11.1 from PyPI, built on torch's stable ABI: "requires torch 2.11
or newer, including all future releases") checked against a container root with the installed torch 2.13.0 CPU
as its PyTorch backend, and loaded the same way by the real torch in a subprocess.

- The same op library preloaded from two paths (two files, same content): ld.so maps both and their static
  initialisers register with torch twice, which kills the process: a second STABLE_TORCH_LIBRARY_FRAGMENT
  def() of one schema aborts ("Tried to register an operator ... multiple times": 2.11.1 is built with torch
  2.13's headers, whose def() checks the shim's error code; older builds ignore it and load, see
  test_torch_duplicate_registrations), a second STABLE_TORCH_LIBRARY of one namespace crashes (the shim's
  error is ignored, def() then uses a null handle). Shipped stripped (no .symtab), the library still says so:
  its imports of the registration API and its schema strings; identical content is enough to know that every
  registration runs again (CO406).
- STABLE_TORCH_LIBRARY* blocks register namespaces as TORCH_LIBRARY* do: a TorchScript model calling them
  loads once the library is preloaded (no CO408), stripped or not.
- Two builds (torchaudio 2.10.0 and 2.11.1) define the same schemas in one namespace: CO406 as well, an error
  when 2.11.1's registers second (it aborts), a warning when 2.10.0's does (it loads, its kernels replacing
  2.11.1's); preloaded, the one listed first registers second.
- torchvision 0.28.0's _C.so (torch::Library, paired with torch==2.13.0), stripped: a second copy aborts
  (CO406); the schema strings qualified with torchvision:: that survive show its namespace (no CO408 for a
  model calling torchvision::nms, whose own schema g++ built from immediates).

The PyPI builds need CUDA libraries (libcudart.so.13, libc10_cuda.so, libtorch_cuda.so) that the CPU torch
lacks; stubs generated from the libraries stand in for them (fixtures/published_torch.py), in the container's
PyTorch backend directory as in the real thing. The wheels are downloaded with pip into
~/.cache/customops-wheels/ (reused afterwards); without the index the tests skip and say so.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
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
from customops.elf.symtab import symtab_strings
from customops.findings import Finding
from customops.inspect.files import SCHEMA_ARROW, readonly_strings
from customops.inspect.registrations import static_registrations, torch_op_library
from customops.rules.registrations import OVERRIDDEN
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import published_torch as published
from fixtures import real_container, wheels
from fixtures.build import DEFAULT_OUT

pytestmark = pytest.mark.frameworks
LOAD_ERRORS = {"CO301", "CO302", "CO303", "CO304", "CO306", "CO307", "CO308"}
AUDIO = "2.11.1"  # the torchaudio release paired with torch 2.13 (stable ABI, torch>=2.11)
OLDER = "2.10.0"  # an earlier build of the same library (torch==2.10.0, already on the stable shims)
MEMBERS = ("torchaudio/lib/libtorchaudio.so", "torchaudio/lib/_torchaudio.so")
VISION = "0.28.0"  # torchvision for torch==2.13.0: TORCH_LIBRARY_FRAGMENT(torchvision) through torch::Library
VISION_OPS = "torchvision/_C.so"


def torch_lib() -> Path:
    torch = real_container.package("torch")
    if torch is None:
        pytest.skip("torch is not installed")
    return torch / "lib"


def extracted(version: str) -> dict[str, Path]:
    try:
        return wheels.extract("torchaudio", version, MEMBERS)
    except wheels.Unavailable as exc:
        pytest.skip(f"no torchaudio {version} wheel: {exc}")


@pytest.fixture(scope="module")
def audio() -> dict[str, Path]:
    return extracted(AUDIO)


@pytest.fixture(scope="module")
def vision() -> Path:
    try:
        return wheels.extract("torchvision", VISION, (VISION_OPS,))["_C.so"]
    except wheels.Unavailable as exc:
        pytest.skip(f"no torchvision {VISION} wheel: {exc}")


@pytest.fixture(scope="module")
def stubs(audio: dict[str, Path]) -> Path:
    libraries = list(audio.values())
    with contextlib.suppress(wheels.Unavailable):  # without them the stubs serve torchaudio 2.11.1 only
        libraries += wheels.extract("torchaudio", OLDER, MEMBERS).values()
        libraries += wheels.extract("torchvision", VISION, (VISION_OPS,)).values()
    try:
        return published.cuda_stubs(libraries, torch_lib(), DEFAULT_OUT)
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))


def stripped(library: Path, tmp_path: Path) -> Path:
    try:
        return published.stripped(library, tmp_path / "stripped")
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def root(tree: Path, stubs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real-framework container root, its PyTorch backend directory holding the CUDA stubs too."""
    try:
        built = real_container.assemble(tree, tmp_path_factory.mktemp("torch") / "root")
    except LookupError as exc:
        pytest.skip(str(exc))
    for stub in stubs.iterdir():
        real_container.place(stub, built / "opt/tritonserver/backends/pytorch" / stub.name)
    return built


def check(root: Path, libraries: dict[str, Path], model: tuple[str, Path, Path] | None = None,
          python: bool = False) -> tuple[Path, list[Finding]]:
    """customops check of a repository whose manifest preloads `libraries` ([pytorch] ops, each copied to
    models/pt/ops/<key>/<name>: separate files) and, with `model` (its forward's body, the library to script it
    with, the stubs), holds a TorchScript model 'pt'. With `python`, libpython is preloaded too ([host]): the
    subprocesses have it in their global scope, a server only so (as Triton's QA does for such op libraries)."""
    repo = root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "pt" / "1").mkdir(parents=True)
    (repo / "pt" / "config.pbtxt").write_text('backend: "pytorch"\n')
    ops = []
    for key, library in libraries.items():
        (repo / "pt" / "ops" / key).mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, repo / "pt" / "ops" / key / library.name)
        ops.append(f'"pt/ops/{key}/{library.name}"')
    manifest = f"[pytorch]\nops = [{', '.join(ops)}]\n"
    if python:
        libpython = real_container.place_libpython(root, repo / "pt" / "host")
        manifest += f'[host]\npreload = ["pt/host/{libpython.name}"]\n'
    (repo / "customops.toml").write_text(manifest)
    if model:
        scripted_model(repo / "pt" / "1" / "model.pt", *model)
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(root)), ())
    return repo, list(result.findings)


def real_torch(code: str, stubs: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """The real thing: torch 2.13 CPU in a subprocess, the CUDA stubs on LD_LIBRARY_PATH."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(stubs)}
    return subprocess.run([sys.executable, "-c", "import torch\n" + code], capture_output=True, text=True,
                          timeout=timeout, env=env)


def preloaded(paths: list[Path], stubs: Path) -> subprocess.CompletedProcess[str]:
    """The real thing as the server starts: `paths` in LD_PRELOAD (torch 2.13 CPU and the CUDA stubs on the
    library path), before a program that does nothing else."""
    env = {**os.environ, "LD_LIBRARY_PATH": f"{stubs}:{torch_lib()}", "LD_PRELOAD": " ".join(map(str, paths))}
    return subprocess.run([shutil.which("true") or "/bin/true"], capture_output=True, text=True, env=env, timeout=120)


def loads(paths: list[Path]) -> str:
    return "".join(f"torch.ops.load_library({str(p)!r})\n" for p in paths) + "print('loaded')\n"


MODEL = '''import sys, torch
for library in sys.argv[2:]:
    torch.ops.load_library(library)
class M(torch.nn.Module):
    def forward(self, x):
        return {body}
torch.jit.script(M()).save(sys.argv[1])
'''
LFILTER = "torch.ops.torchaudio._lfilter_core_loop(x, torch.tensor([[0.0, 1.0]]), torch.zeros(1, 1, 6))"
NMS = "torch.ops.torchvision.nms(x, torch.tensor([0.9, 0.8]), 0.5)"


def scripted_model(dest: Path, body: str, library: Path, stubs: Path) -> None:
    """A TorchScript model whose forward(x) returns `body`, scripted with `library` loaded (torch.jit.script
    needs the source in a file)."""
    script = dest.parent / "make_model.py"
    script.write_text(MODEL.format(body=body))
    proc = subprocess.run([sys.executable, str(script), str(dest), str(library)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "LD_LIBRARY_PATH": str(stubs)})
    script.unlink()
    assert proc.returncode == 0, proc.stderr[-2000:]


def co406(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.code == "CO406"]


def test_stable_torch_library_blocks_are_read_from_the_symbol_table_and_schemas_from_the_strings(audio,
                                                                                               tmp_path):
    reader = ElfReader(use_cache=False)

    def read(path: Path) -> set[tuple[str, str]]:
        info = reader.read(str(path))
        found = [*static_registrations(info, symtab_strings(str(path), b"TORCH_LIBRARY")),
                 *torch_op_library(info, readonly_strings(str(path), SCHEMA_ARROW))]
        return {(r.kind, r.name) for r in found if r.framework == "torch"}

    schemas = {("schema", op) for op in ("forced_align", "_lfilter_core_loop", "_overdrive_core_loop",
                                         "rnnt_loss_forward")}
    assert read(audio["libtorchaudio.so"]) == {("fragment", "torchaudio"), ("impl", "torchaudio"),
                                               ("op-library", ""), *schemas}
    assert read(stripped(audio["libtorchaudio.so"], tmp_path)) == {("op-library", ""), *schemas}
    assert read(audio["_torchaudio.so"]) == {("namespace", "_torchaudio"), ("impl", "_torchaudio"),
                                             ("op-library", ""), ("schema", "is_align_available"),
                                             ("schema", "cuda_version")}


@pytest.mark.parametrize("name", ["libtorchaudio.so", "_torchaudio.so"])
def test_a_stripped_torch_op_library_preloaded_once_loads_as_predicted(root, audio, stubs, tmp_path, name):
    library = stripped(audio[name], tmp_path)
    repo, findings = check(root, {"a": library})
    assert not [f for f in findings if f.severity == Severity.ERROR], findings
    real = real_torch(loads([repo / "pt/ops/a" / name]), stubs)
    assert real.returncode == 0 and real.stdout.strip() == "loaded", real.stderr[-2000:]


@pytest.mark.parametrize("strip", [True, False], ids=["stripped", "with-symtab"])
def test_a_stripped_torch_op_library_preloaded_from_two_paths_aborts_as_predicted(root, audio, stubs, tmp_path,
                                                                                  strip):
    """libtorchaudio.so: STABLE_TORCH_LIBRARY_FRAGMENT(torchaudio) blocks; its schemas are defined twice. Its
    .symtab says FRAGMENT, hence the message; stripped, it imports the shims of all three block kinds (the
    StableLibrary constructor is not inlined), so whether it aborts or crashes is left open: it dies either way."""
    library = stripped(audio["libtorchaudio.so"], tmp_path) if strip else audio["libtorchaudio.so"]
    repo, findings = check(root, {"a": library, "b": library})
    (finding,) = co406(findings)
    assert finding.severity == Severity.ERROR and finding.library == "/models/pt/ops/b/libtorchaudio.so"
    assert [f for f in findings if f.severity == Severity.ERROR] == [finding]  # it loads; its initialisers abort
    real = real_torch(loads([repo / "pt/ops/a" / library.name, repo / "pt/ops/b" / library.name]), stubs)
    assert real.returncode == -signal.SIGABRT, real.stderr[-2000:]
    assert "Tried to register an operator (torchaudio::" in real.stderr
    if strip:
        assert finding.predicted is None and "aborts (or crashes) the server" in finding.message
        assert "forced_align" in " ".join(finding.evidence)
    else:
        assert finding.predicted == "with the same name and overload name multiple times"
        assert finding.predicted in real.stderr


def test_a_stripped_stable_torch_library_preloaded_from_two_paths_crashes_as_predicted(root, audio, stubs,
                                                                                      tmp_path):
    """_torchaudio.so: STABLE_TORCH_LIBRARY(_torchaudio); torch refuses the namespace the second time, the
    shim's error is ignored and def() then runs on a null library handle."""
    library = stripped(audio["_torchaudio.so"], tmp_path)
    repo, findings = check(root, {"a": library, "b": library})
    (finding,) = co406(findings)
    assert finding.severity == Severity.ERROR and finding.library == "/models/pt/ops/b/_torchaudio.so"
    assert "SIGSEGV" in finding.message and finding.predicted is None
    assert [f for f in findings if f.severity == Severity.ERROR] == [finding]
    real = real_torch(loads([repo / "pt/ops/a" / library.name, repo / "pt/ops/b" / library.name]), stubs)
    assert real.returncode == -signal.SIGSEGV, (real.returncode, real.stderr[-2000:])


def test_one_file_preloaded_under_two_paths_registers_once(root, audio, stubs, tmp_path):
    """A hard link is the same file (device, inode): ld.so maps it once and its initialisers run once."""
    library = stripped(audio["libtorchaudio.so"], tmp_path)
    repo, _ = check(root, {"a": library})
    (repo / "pt/ops/b").mkdir()
    os.link(repo / "pt/ops/a" / library.name, repo / "pt/ops/b" / library.name)
    (repo / "customops.toml").write_text(f'[pytorch]\nops = ["pt/ops/a/{library.name}", "pt/ops/b/{library.name}"]\n')
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(root)), ())
    assert not co406(list(result.findings))
    real = real_torch(loads([repo / "pt/ops/a" / library.name, repo / "pt/ops/b" / library.name]), stubs)
    assert real.returncode == 0 and real.stdout.strip() == "loaded", real.stderr[-2000:]


@pytest.mark.parametrize("strip", [False, True], ids=["with-symtab", "stripped"])
@pytest.mark.parametrize("listed", ["newer-first", "older-first"])
def test_two_builds_of_one_stable_torch_op_library_load_or_abort_as_predicted(root, audio, stubs, tmp_path, strip,
                                                                             listed):
    """torchaudio 2.10.0's and 2.11.1's libtorchaudio.so both define torchaudio::forced_align and the rest. Preloaded,
    the one listed first registers second (ld.so runs the last listed preload's initialisers first), and that one
    decides. 2.11.1's def() checks the shim's error code (built with torch 2.13's headers) and throws: it aborts
    the server, an error while the namespace is readable (.symtab), a warning once both are stripped (the
    namespace is an argument in the code, not a string customops can attribute). 2.10.0's ignores it: the server
    loads, its kernels in place of 2.11.1's (a warning)."""
    older, newer = extracted(OLDER)["libtorchaudio.so"], audio["libtorchaudio.so"]
    if strip:
        older, newer = stripped(older, tmp_path / "older"), stripped(newer, tmp_path / "newer")
    libraries = {"new": newer, "old": older} if listed == "newer-first" else {"old": older, "new": newer}
    repo, findings = check(root, libraries)
    (finding,) = co406(findings)
    later = next(iter(libraries))  # registers second
    assert finding.library == f"/models/pt/ops/{later}/libtorchaudio.so"
    real = preloaded([repo / "pt/ops" / key / "libtorchaudio.so" for key in libraries], stubs)
    if later == "old":
        assert finding.severity == Severity.WARNING
        assert real.returncode == 0, (real.returncode, real.stderr[-2000:])
        assert OVERRIDDEN in real.stderr
        if strip:
            assert "unless the library ignores that" in finding.message
        else:
            assert finding.predicted == OVERRIDDEN
        return
    assert finding.severity == (Severity.WARNING if strip else Severity.ERROR)
    assert real.returncode == -signal.SIGABRT, real.stderr[-2000:]
    assert "with the same name and overload name multiple times" in real.stderr
    refused = real.stderr.split("Tried to register an operator (", 1)[1].split("(", 1)[0]  # torchaudio::<op>
    if strip:
        assert refused.split("::")[1] in finding.evidence[0]  # "both define: <op>, ..."
    else:
        assert finding.predicted in real.stderr and refused in finding.evidence[0]


@pytest.mark.parametrize("strip", [False, True], ids=["with-symtab", "stripped"])
def test_stable_abi_registrations_satisfy_a_torchscript_model(root, audio, stubs, tmp_path, strip):
    library = stripped(audio["libtorchaudio.so"], tmp_path) if strip else audio["libtorchaudio.so"]
    repo, findings = check(root, {"ops": library}, model=(LFILTER, audio["libtorchaudio.so"], stubs))
    assert not [f for f in findings if f.code in ("CO408", *LOAD_ERRORS)], findings
    model = repo / "pt" / "1" / "model.pt"
    real = real_torch(loads([repo / "pt/ops/ops" / library.name]) + f"m = torch.jit.load({str(model)!r})\n"
                      "print(m(torch.ones(1, 1, 5)).tolist())\n", stubs)
    assert real.returncode == 0, real.stderr[-2000:]
    assert real.stdout.split("\n")[:2] == ["loaded", "[[[0.0, 1.0, 1.0, 1.0, 1.0, 1.0]]]"], real.stdout


def test_a_torchscript_model_calling_stable_abi_ops_fails_without_their_library(root, audio, stubs):
    repo, findings = check(root, {}, model=(LFILTER, audio["libtorchaudio.so"], stubs))
    (finding,) = [f for f in findings if f.code == "CO408"]
    assert finding.symbol == "torchaudio::_lfilter_core_loop"
    real = real_torch(f"torch.jit.load({str(repo / 'pt/1/model.pt')!r})\n", stubs)
    assert real.returncode != 0 and "Unknown builtin op: torchaudio::_lfilter_core_loop" in real.stderr


STABLE_LIKE = r'''
/* What STABLE_TORCH_LIBRARY_FRAGMENT(labops, m) { m.def(...); } leaves in a library, in C: calls of torch's
   stable C shims with string literals (namespace, schemas, file). */
int aoti_torch_library_init_fragment(const char*, const char*, unsigned, void**);
int aoti_torch_library_def(void*, const char*);
static void* lib;
int labops_twice(int x) { return 2 * x; }  /* an export: the GNU hash table then counts the imports too */
__attribute__((constructor)) static void init(void) {
  aoti_torch_library_init_fragment("labops", __FILE__, __LINE__, &lib);
  aoti_torch_library_def(lib, "twice(Tensor x) -> Tensor");
  aoti_torch_library_def(lib, "labops::add.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)");
  aoti_torch_library_def(lib, "not a schema) -> x");
}
'''


def test_a_stripped_library_calling_the_stable_shims_is_a_torch_op_library_with_its_schemas(tmp_path):
    """Read from imports and string literals only: no .symtab, no torch needed."""
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    source = tmp_path / "stable_like.c"
    source.write_text(STABLE_LIKE)
    library = tmp_path / "libstable_like.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-s", "-o", str(library), str(source)], check=True)
    info = ElfReader(use_cache=False).read(str(library))
    assert symtab_strings(str(library), b"TORCH_LIBRARY") == []
    found = torch_op_library(info, readonly_strings(str(library), SCHEMA_ARROW))
    assert sorted((r.kind, r.name, r.api, r.blocks) for r in found) == [
        ("op-library", "", "stable", ("fragment",)), ("schema", "labops::add.out", "stable", ()),
        ("schema", "twice", "stable", ())]


def test_a_stripped_torch_library_op_library_preloaded_from_two_paths_aborts_as_predicted(root, vision, stubs,
                                                                                        tmp_path):
    """torchvision's _C.so (torch::Library, not the stable ABI): stripped, only its imports and some of its
    schema strings are left (g++ builds the others from immediates); a second copy aborts the server."""
    library = stripped(vision, tmp_path)
    repo, findings = check(root, {"a": library, "b": library}, python=True)
    (finding,) = co406(findings)
    assert finding.severity == Severity.ERROR and finding.library == "/models/pt/ops/b/_C.so"
    assert finding.message.endswith("which aborts the server") and finding.predicted is None
    assert [f for f in findings if f.severity == Severity.ERROR] == [finding]
    real = real_torch(loads([repo / "pt/ops/a" / library.name, repo / "pt/ops/b" / library.name]), stubs)
    assert real.returncode == -signal.SIGABRT, real.stderr[-2000:]
    assert "Tried to register an operator (torchvision::" in real.stderr


@pytest.mark.parametrize("strip", [False, True], ids=["with-symtab", "stripped"])
def test_a_qualified_schema_string_shows_the_namespace_a_torchscript_model_calls(root, vision, stubs, tmp_path,
                                                                               strip):
    """torchvision::nms's own schema is not a whole string in the stripped library, but others qualified with
    torchvision:: are: the namespace is registered, so the model's call is not reported (CO408)."""
    library = stripped(vision, tmp_path) if strip else vision
    repo, findings = check(root, {"ops": library}, model=(NMS, vision, stubs), python=True)
    assert not [f for f in findings if f.code in ("CO408", *LOAD_ERRORS)], findings
    model = repo / "pt" / "1" / "model.pt"
    real = real_torch(loads([repo / "pt/ops/ops" / library.name]) + f"m = torch.jit.load({str(model)!r})\n"
                      "print(m(torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]])).tolist())\n", stubs)
    assert real.returncode == 0, real.stderr[-2000:]
    assert real.stdout.split("\n")[:2] == ["loaded", "[0]"], real.stdout


TEXT = "0.18.0"  # torchtext for torch 2.3.0, built with the pre-C++11 std::string ABI
TEXT_OPS = "torchtext/lib/libtorchtext.so"


def test_an_old_torch_library_registration_calling_what_torch_2_13_lacks_stops_the_server_at_start(root, stubs):
    """torchtext 0.18.0's TORCH_LIBRARY block calls torch::Library::Library(Kind, std::string, ...) of the old string
    ABI, which torch 2.13 (C++11 ABI) does not define: preloaded lazily, its static initializer's call is the
    function's first, so the server dies before main, with ld.so's "symbol lookup error" (issue #38 §1)."""
    try:
        library = wheels.extract("torchtext", TEXT, (TEXT_OPS,))["libtorchtext.so"]
    except wheels.Unavailable as exc:
        pytest.skip(f"no torchtext {TEXT} wheel: {exc}")
    repo, findings = check(root, {"a": library})
    served = "/models/pt/ops/a/libtorchtext.so"
    (dies,) = [f for f in findings if f.code == "CO304" and f.library == served]
    assert dies.severity == Severity.ERROR and dies.symbol is not None
    assert "torch::Library::Library(" in dies.message and "static initializer" in dies.message, dies.message
    assert "which the container's libtorch_cpu.so does not define" in dies.message  # built against another torch
    assert "its static initializers register TORCH_LIBRARY_FRAGMENT(torchtext)" in dies.evidence
    assert dies.hint.startswith("Rebuild against the framework version shipped in the container: libtorch_cpu.so "
                                f"version {importlib.metadata.version('torch').split('+')[0]}"), dies.hint
    assert dies.predicted is not None and dies.predicted.endswith(f"undefined symbol: {dies.symbol}")
    assert not [f for f in findings if f.code == "CO305" and f.symbol == dies.symbol]  # not a first-call warning
    real = preloaded([repo / "pt/ops/a/libtorchtext.so"], stubs)  # the process as the server starts it
    assert real.returncode == 127, real.stderr[-2000:]
    (said,) = [line for line in real.stderr.splitlines() if "symbol lookup error" in line]
    assert said.endswith(f"libtorchtext.so: undefined symbol: {dies.symbol}"), (said, dies.predicted)
    loaded = real_torch(loads([repo / "pt/ops/a/libtorchtext.so"]), stubs)  # torch.ops.load_library: RTLD_NOW
    assert loaded.returncode != 0 and "undefined symbol" in loaded.stderr
