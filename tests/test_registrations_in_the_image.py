"""CO406 and CO408 for op libraries that are not in the model repository but in the image (issue #38 §3): a
manifest entry naming a container path (`[pytorch] ops = ["/opt/ops/liblabops_a.so"]`, the file in the container
root) or an LD_PRELOAD the server inherits (launch). Their registrations count exactly like the repository's,
as the real torch shows: loading them (torch.ops.load_library, or LD_PRELOAD before a program's start) registers
the namespace a TorchScript model calls, and two of them aborting torch is the same abort wherever they lie."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from customops.app.check import run_check
from customops.app.inherited import Inherited
from customops.findings import Finding
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import real_container
from fixtures.real_container import place

pytestmark = [pytest.mark.frameworks, pytest.mark.oracle]
PYTORCH = "/opt/tritonserver/backends/pytorch"
TWO_LIBRARIES = "Only a single TORCH_LIBRARY can be used to register the namespace labops"
TWO_SCHEMAS = "with the same name and overload name multiple times"


@pytest.fixture(scope="module")
def root(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if real_container.package("torch") is None:
        pytest.skip("torch is not installed")
    try:
        return real_container.assemble(tree, tmp_path_factory.mktemp("image") / "root")
    except LookupError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def ops() -> Path:
    from fixtures import torch_ops

    return torch_ops.build()


@pytest.fixture(scope="module")
def model(ops: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A traced TorchScript model calling labops::add_one and labops::twice (liblabops_a registers them)."""
    path = tmp_path_factory.mktemp("model") / "model.pt"
    code = (f"import torch\ntorch.ops.load_library({str(ops / 'liblabops_a.so')!r})\n"
            "class M(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        return torch.ops.labops.twice(torch.ops.labops.add_one(x))\n"
            f"torch.jit.trace(M(), torch.ones(2)).save({str(path)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    return path


def in_image(root: Path, ops: Path, *names: str) -> list[str]:
    """The op libraries placed in the container root, each in a directory of its own under /opt (a name twice: a
    copy, another file, which ld.so loads again, not a hard link); their container paths."""
    paths = []
    for n, name in enumerate(names):
        path = f"/opt/ops{n}/lib{name}.so"
        dest = root / path.lstrip("/")
        if name in names[:n]:
            dest.unlink(missing_ok=True)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ops / f"lib{name}.so", dest)
        else:
            place(ops / f"lib{name}.so", dest)
        paths.append(path)
    return paths


def check(root: Path, model: Path | None, ops: list[str], inherited: Inherited | None = None) -> list[Finding]:
    """customops check of a repository in the root (/models) with one PyTorch model, `ops` in `[pytorch] ops`."""
    repo = root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "pt" / "1").mkdir(parents=True)
    (repo / "pt" / "config.pbtxt").write_text('backend: "pytorch"\n')
    if model is not None:
        shutil.copy(model, repo / "pt" / "1" / "model.pt")
    listed = ", ".join(f'"{p}"' for p in ops)
    (repo / "customops.toml").write_text(f"[pytorch]\nops = [{listed}]\n" if ops else "")
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(root)), (),
                       **({"inherited": inherited} if inherited else {}))
    return list(result.findings)


def codes(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


def preloaded(root: Path, paths: list[str], code: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real thing: the image's libraries in LD_PRELOAD before a program's start (Python running `code`, else a
    program that does nothing)."""
    env = {**os.environ, "LD_PRELOAD": " ".join(str(root / p.lstrip("/")) for p in paths)}
    command = [sys.executable, "-c", code] if code else [shutil.which("true") or "/bin/true"]
    if not code:
        env["LD_LIBRARY_PATH"] = str(root / PYTORCH.lstrip("/"))
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_co408_a_namespace_registered_by_a_library_in_the_image_is_registered(root, ops, model):
    (path,) = in_image(root, ops, "labops_a")
    assert codes(check(root, model, []), "CO408")  # the control: nothing loaded registers labops
    assert not codes(check(root, model, [path]), "CO408")
    real = preloaded(root, [path], f"import torch; m = torch.jit.load({str(model)!r}); "
                                   "assert int(m(torch.ones(1))[0]) == 4")
    assert real.returncode == 0, real.stderr[-2000:]


def test_co406_two_libraries_in_the_image_define_one_torch_library(root, ops):
    paths = in_image(root, ops, "labops_a", "labops_b")
    (finding,) = codes(check(root, None, paths), "CO406")
    assert finding.library == paths[1] and finding.symbol == "labops" and finding.predicted
    assert TWO_LIBRARIES in finding.predicted
    real = preloaded(root, paths)
    assert real.returncode != 0 and TWO_LIBRARIES in real.stderr, real.stderr[-2000:]


def test_co406_two_fragments_in_the_image_define_one_schema(root, ops):
    """One fragment library in two places of the image (two files, the same content): every schema it defines is
    defined again (pytorch#148148)."""
    paths = in_image(root, ops, "labops_a", "labops_frag", "labops_frag")
    (finding,) = codes(check(root, None, paths), "CO406")
    assert finding.library == paths[2] and "refuses each schema" in finding.message
    real = preloaded(root, paths)
    assert real.returncode != 0 and TWO_SCHEMAS in real.stderr, real.stderr[-2000:]
    alone = preloaded(root, paths[:2])  # the control: one fragment extends the namespace
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert not codes(check(root, None, paths[:2]), "CO406")


def test_co408_and_co406_count_the_libraries_of_an_inherited_ld_preload(root, ops, model):
    """launch: the server inherits LD_PRELOAD (and LD_LIBRARY_PATH) from its environment."""
    first, second = in_image(root, ops, "labops_a", "labops_b")
    inherited = Inherited.of({"LD_PRELOAD": first, "LD_LIBRARY_PATH": PYTORCH}, "last")
    assert not [f for f in check(root, model, [], inherited) if f.code in ("CO408", "CO302")]
    (finding,) = codes(check(root, None, [second], inherited), "CO406")
    assert {finding.library, *(r.library for r in finding.related)} == {first, second}
    real = preloaded(root, [second, first])
    assert real.returncode != 0 and TWO_LIBRARIES in real.stderr, real.stderr[-2000:]


def test_co406_a_tensorflow_op_library_preloaded_from_two_places_registers_its_ops_once(root):
    """TensorFlow's op registry is the process's: a copy counts whichever manifest entry preloads it."""
    package = real_container.package("tensorflow_text")
    if package is None:
        pytest.skip("tensorflow_text is not installed")
    ngrams = package / "python" / "ops" / "_ngrams_op.so"
    paths = [f"/opt/tf{n}/{ngrams.name}" for n in range(2)]
    for path in paths:
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ngrams, root / path.lstrip("/"))
    repo = root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir()
    (repo / "customops.toml").write_text(f'[tensorflow]\npreload = ["{paths[0]}"]\n[host]\npreload = ["{paths[1]}"]\n')
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(root)), ())
    (finding,) = [f for f in result.findings if f.code == "CO406" and "TensorFlow" in f.message]
    assert {finding.library, *(r.library for r in finding.related)} == set(paths)
    first, second = (str(root / p.lstrip("/")) for p in paths)
    real = subprocess.run([sys.executable, "-c", "import tensorflow as tf\n"
                           f"first = tf.load_op_library({first!r}); second = tf.load_op_library({second!r})\n"
                           "assert 'TFText_NgramsStringJoin' in set(dir(first)) - set(dir(second))\n"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert real.returncode == 0, real.stderr[-2000:]


def needing(root: Path, ops: Path, name: str, directory: str) -> str:
    """An op library of its own that registers nothing and needs lib`name`.so, which lies beside it (RUNPATH
    $ORIGIN): the library that holds the TORCH_LIBRARY block comes into the process as its dependency. Its container
    path."""
    place(ops / f"lib{name}.so", root / directory.lstrip("/") / f"lib{name}.so")
    source = root / directory.lstrip("/") / "wrapper.c"
    source.write_text("int wrapper_loaded(void) { return 1; }\n")
    wrapper = f"{directory}/libwrapper.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(root / wrapper.lstrip("/")), str(source), "-Wl,--no-as-needed",
                    f"-L{root / directory.lstrip('/')}", f"-l{name}", "-Wl,-rpath,$ORIGIN"], check=True,
                   capture_output=True)
    return wrapper


def test_co406_a_torch_library_an_op_library_brings_as_a_dependency_registers_as_it_does(root, ops, model):
    """The TORCH_LIBRARY block of a library that an op library needs runs when the op library is loaded (ld.so
    initializes the dependency first): it registers the namespace a model calls, and a second TORCH_LIBRARY of that
    namespace aborts the server, as if the dependency were listed itself."""
    wrapper = needing(root, ops, "labops_a", "/opt/wrapped")
    assert not codes(check(root, model, [wrapper]), "CO408")  # the namespace is registered, through the dependency
    (second,) = in_image(root, ops, "labops_b")
    (finding,) = codes(check(root, None, [wrapper, second]), "CO406")
    assert finding.symbol == "labops" and TWO_LIBRARIES in (finding.predicted or "")
    assert {finding.library, *(r.library for r in finding.related)} == {"/opt/wrapped/liblabops_a.so", second}
    real = preloaded(root, [wrapper, second])
    assert real.returncode != 0 and TWO_LIBRARIES in real.stderr, real.stderr[-2000:]
    alone = preloaded(root, [wrapper], f"import torch; m = torch.jit.load({str(model)!r}); "
                                       "assert int(m(torch.ones(1))[0]) == 4")
    assert alone.returncode == 0, alone.stderr[-2000:]
