"""customops check against a container root assembled from the real framework wheels (torch 2.13.0 CPU,
tensorflow-cpu, onnxruntime laid out as /opt/tritonserver/backends/<name>/) with real published custom-op
libraries; its verdicts must match what the real frameworks do when they load the same libraries."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from customops.app.check import run_check
from customops.codes import Severity
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import real_container
from fixtures.real_container import place

pytestmark = pytest.mark.frameworks
LOAD_ERRORS = {"CO301", "CO302", "CO303", "CO304", "CO306", "CO308"}


def package(name: str) -> Path:
    found = real_container.package(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


@pytest.fixture(scope="module")
def real_root(tree, tmp_path_factory) -> Path:
    try:
        return real_container.assemble(tree, tmp_path_factory.mktemp("real") / "root")
    except LookupError as exc:
        pytest.skip(str(exc))


def repository(root: Path, models: dict[str, tuple[str, Path]], manifest: str = "") -> Path:
    repo = root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir()
    for name, (backend, op_library) in models.items():
        (repo / name / "1").mkdir(parents=True)
        if backend == "tensorflow":  # the core tells a TensorFlow model's platform from its file
            (repo / name / "1" / "model.graphdef").write_bytes(b"")
        dest = repo / name / "ops" / op_library.name
        place(op_library, dest)
        library = f"/models/{name}/ops/{op_library.name}"
        (repo / name / "config.pbtxt").write_text(
            f'backend: "{backend}"\nmodel_operations {{ op_library_filename: "{library}" }}\n')
    (repo / "customops.toml").write_text(manifest)
    return repo


def predicted_ok(result, container_path: str) -> bool:  # type: ignore[no-untyped-def]
    return not [f for f in result.findings if f.library == container_path and f.code in LOAD_ERRORS]


def really_loads(code: str) -> tuple[bool, str]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return proc.returncode == 0, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


def published_libraries() -> dict[str, Path]:
    extensions = Path(importlib.util.find_spec("onnxruntime_extensions").origin).parent  # type: ignore[union-attr]
    (ext_lib,) = extensions.glob("_extensions_pydll*.so")
    return {"ngrams": package("tensorflow_text") / "python" / "ops" / "_ngrams_op.so", "extensions": ext_lib,
            "c10": package("torch") / "lib" / "libc10.so", "aoti": package("torch") / "lib" / "libaoti_custom_ops.so"}


@pytest.fixture(scope="module")
def published(real_root):  # type: ignore[no-untyped-def]
    """One repository loading four published libraries the way the server would, checked once: the
    TensorFlow Text op library, the ONNX Runtime extensions, libc10 given to ONNX Runtime by mistake, and
    torch's AOTI op library preloaded for the PyTorch backend."""
    libraries = published_libraries()
    repo = repository(real_root, {"tf_text": ("tensorflow", libraries["ngrams"]),
                                  "ort_ext": ("onnxruntime", libraries["extensions"]),
                                  "ort_wrong": ("onnxruntime", libraries["c10"])})
    aoti = libraries["aoti"]
    place(aoti, repo / "pt_ops" / aoti.name)
    (repo / "pt_ops" / "1").mkdir()
    (repo / "pt_ops" / "config.pbtxt").write_text('backend: "pytorch"\n')
    # The frameworks below run in a Python process, where libpython is in the global scope; the server gets
    # the same only by preloading it, as Triton's own QA does for op libraries that import Python symbols.
    libpython = real_container.place_libpython(real_root, repo / "host")
    (repo / "customops.toml").write_text(f'[pytorch]\nops = ["pt_ops/{aoti.name}"]\n'
                                         f'[host]\npreload = ["host/{libpython.name}"]\n')
    return libraries, run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(real_root)),
                                ())


# (what the server loads, the library, the same load done by the real framework, whether it loads)
VERDICTS = [
    pytest.param("/models/tf_text/ops/{name}", "ngrams", "import tensorflow as tf; tf.load_op_library({path!r})",
                 True, id="tensorflow-text-op-library-loads-into-tensorflow"),
    pytest.param("/models/ort_ext/ops/{name}", "extensions", "import onnxruntime as o; s = o.SessionOptions(); "
                 "s.register_custom_ops_library({path!r})", True, id="onnxruntime-extensions-register"),
    pytest.param("/models/ort_wrong/ops/{name}", "c10", "import onnxruntime as o; s = o.SessionOptions(); "
                 "s.register_custom_ops_library({path!r})", False, id="libc10-is-no-onnxruntime-op-library"),
    pytest.param("/models/pt_ops/{name}", "aoti", "import torch; torch.ops.load_library({path!r})", True,
                 id="torch-aoti-op-library-loads-into-torch"),
]


@pytest.mark.parametrize(("served", "library", "load", "loads"), VERDICTS)
def test_a_verdict_matches_the_real_framework(published, served, library, load, loads):  # type: ignore[no-untyped-def]
    libraries, result = published
    path = libraries[library]
    real, message = really_loads(load.format(path=str(path)))
    predicted = predicted_ok(result, served.format(name=path.name))
    assert predicted == real == loads, f"customops predicted {'success' if predicted else 'failure'}; {message}"


def test_libc10_given_to_onnxruntime_is_only_a_missing_entry_point(published):
    libraries, result = published
    assert [f.code for f in result.findings if f.library == f"/models/ort_wrong/ops/{libraries['c10'].name}"
            ] == ["CO308"]


def test_a_tensorflow_op_library_under_onnxruntime_fails_as_onnxruntime_reports(real_root):
    ngrams = package("tensorflow_text") / "python" / "ops" / "_ngrams_op.so"
    repo = repository(real_root, {"ort_tf": ("onnxruntime", ngrams)})
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), ())
    (finding,) = [f for f in result.findings if f.code in LOAD_ERRORS]
    assert finding.code == "CO302"
    real_ok, message = really_loads("import onnxruntime as o; s = o.SessionOptions(); "
                                    f"s.register_custom_ops_library({str(ngrams)!r})")
    assert not real_ok and finding.predicted in message


def test_an_onnxruntime_op_library_that_imports_python_symbols_fails_in_a_server_without_libpython(real_root):
    extensions = Path(importlib.util.find_spec("onnxruntime_extensions").origin).parent  # type: ignore[union-attr]
    (ext_lib,) = extensions.glob("_extensions_pydll*.so")
    repo = repository(real_root, {"ort_ext": ("onnxruntime", ext_lib)})
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), ())
    (finding,) = [f for f in result.findings if f.code in LOAD_ERRORS]
    assert finding.code == "CO304" and finding.symbol.startswith("Py")


@pytest.fixture(scope="module")
def torch_ops() -> Path:
    package("torch")
    from fixtures import torch_ops as builder

    return builder.build()


def pytorch_repository(root: Path, libraries: list[Path]) -> Path:
    repo = repository(root, {})
    (repo / "pt" / "1").mkdir(parents=True)
    (repo / "pt" / "config.pbtxt").write_text('backend: "pytorch"\n')
    for library in libraries:
        place(library, repo / "pt" / "ops" / library.name)
    ops = ", ".join(f'"pt/ops/{lib.name}"' for lib in libraries)
    (repo / "customops.toml").write_text(f"[pytorch]\nops = [{ops}]\n")
    return repo


def co406(result) -> list:  # type: ignore[no-untyped-def]
    return [f for f in result.findings if f.code == "CO406"]


def test_torch_namespaces_are_read_from_the_symbol_table(torch_ops):
    from customops.elf.parse import open_mapped, parse_elf
    from customops.elf.symtab import symtab_strings
    from customops.inspect.registrations import static_registrations

    def torch_blocks(name: str) -> set[tuple[str, str]]:
        path = str(torch_ops / f"lib{name}.so")
        info = parse_elf(path, *open_mapped(path))
        found = static_registrations(info, symtab_strings(path, b"TORCH_LIBRARY"))
        return {(r.kind, r.name) for r in found if r.framework == "torch"}

    assert torch_blocks("labops_a") == {("namespace", "labops")}
    assert torch_blocks("labops_b") == {("namespace", "labops")}
    assert torch_blocks("labops_frag") == {("fragment", "labops")}


def test_a_second_torch_library_for_one_namespace_aborts_as_predicted(real_root, torch_ops):
    a, b = torch_ops / "liblabops_a.so", torch_ops / "liblabops_b.so"
    repo = pytorch_repository(real_root, [a, b])
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(real_root)), ())
    (finding,) = co406(result)
    assert finding.symbol == "labops" and finding.library.endswith(b.name)
    real_ok, _ = really_loads(f"import torch; torch.ops.load_library({str(a)!r}); "
                                    f"torch.ops.load_library({str(b)!r})")
    assert not real_ok
    from customops.probe.frameworks import probe_load

    probed = probe_load(str(b), after=(str(a),), timeout=240, framework="torch")
    assert probed.status == "crashed" and finding.predicted in probed.message


def test_a_torch_probe_reports_the_schemas_each_library_registers(torch_ops):
    from customops.probe.frameworks import probe_load

    a, frag = torch_ops / "liblabops_a.so", torch_ops / "liblabops_frag.so"
    assert probe_load(str(a), framework="torch", timeout=240).registered == ("labops::add_one", "labops::twice")
    together = probe_load(str(frag), after=(str(a),), framework="torch", timeout=240)
    assert together.status == "loaded" and together.registered == ("labops::quad",)


def test_a_tensorflow_probe_reports_the_ops_a_published_library_registers_and_a_copy_registers_none(tmp_path):
    from customops.probe.frameworks import probe_load

    ngrams = package("tensorflow_text") / "python" / "ops" / "_ngrams_op.so"
    copy = tmp_path / ngrams.name
    shutil.copy(ngrams, copy)
    alone = probe_load(str(ngrams), framework="tensorflow", timeout=240)
    assert alone.status == "loaded" and alone.registered == ("TFText>NgramsStringJoin",)
    second = probe_load(str(copy), after=(str(ngrams),), framework="tensorflow", timeout=240)
    assert second.status == "loaded" and second.registered == ()


def test_a_torch_library_fragment_may_extend_a_namespace_defined_elsewhere(real_root, torch_ops):
    a, frag = torch_ops / "liblabops_a.so", torch_ops / "liblabops_frag.so"
    repo = pytorch_repository(real_root, [a, frag])
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(real_root)), ())
    assert co406(result) == []
    real_ok, message = really_loads(f"import torch; torch.ops.load_library({str(a)!r}); "
                                    f"torch.ops.load_library({str(frag)!r}); "
                                    "assert int(torch.ops.labops.quad(torch.ones(1))) == 4")
    assert real_ok, message


def test_a_tensorflow_op_library_copied_into_two_models_registers_its_ops_once(real_root, tmp_path):
    ngrams = package("tensorflow_text") / "python" / "ops" / "_ngrams_op.so"
    second = tmp_path / "copy" / ngrams.name
    second.parent.mkdir()
    shutil.copy(ngrams, second)
    repo = repository(real_root, {"tf_a": ("tensorflow", ngrams), "tf_b": ("tensorflow", second)})
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), ())
    (finding,) = co406(result)
    assert finding.model == "tf_b" and finding.severity == Severity.WARNING
    real_ok, message = really_loads(
        "import tensorflow as tf\n"
        f"first = tf.load_op_library({str(ngrams)!r}); second = tf.load_op_library({str(second)!r})\n"
        "dropped = set(dir(first)) - set(dir(second))\n"  # the op wrappers; the rest are module helpers
        "assert 'TFText_NgramsStringJoin' in dropped, dropped\n")
    assert real_ok, message


def torchscript_model(repo: Path, torch_ops: Path) -> Path:
    """A traced model calling labops::add_one and labops::twice (built with liblabops_a loaded)."""
    (repo / "pt" / "1").mkdir(parents=True, exist_ok=True)
    model = repo / "pt" / "1" / "model.pt"
    code = (f"import torch\ntorch.ops.load_library({str(torch_ops / 'liblabops_a.so')!r})\n"
            "class M(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        return torch.ops.labops.twice(torch.ops.labops.add_one(x)) + torch.relu(x)\n"
            f"torch.jit.trace(M(), torch.ones(2)).save({str(model)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    return model


def test_a_torchscript_model_calling_ops_no_loaded_library_registers_fails_to_load(real_root, torch_ops):
    repo = pytorch_repository(real_root, [])
    model = torchscript_model(repo, torch_ops)
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(real_root)), ())
    (finding,) = [f for f in result.findings if f.code == "CO408"]
    assert finding.model == "pt" and finding.symbol.startswith("labops::")
    proc = subprocess.run([sys.executable, "-c", f"import torch; torch.jit.load({str(model)!r})"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    (message,) = [line for line in proc.stderr.splitlines() if line.startswith("Unknown builtin op: ")]
    assert message.startswith("Unknown builtin op: labops::")
    reported = message.split()[3].rstrip(".")
    assert reported in " ".join(finding.evidence), (reported, finding.evidence)


def test_a_torchscript_model_whose_op_library_is_preloaded_loads(real_root, torch_ops):
    library = torch_ops / "liblabops_a.so"
    repo = pytorch_repository(real_root, [library])
    model = torchscript_model(repo, torch_ops)
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(real_root)), ())
    assert not [f for f in result.findings if f.code == "CO408"]
    real_ok, message = really_loads(f"import torch; torch.ops.load_library({str(library)!r}); "
                                    f"m = torch.jit.load({str(model)!r}); assert int(m(torch.ones(1))[0]) == 5")
    assert real_ok, message


def onnx_model_repository(root: Path, domain: str, op_type: str) -> tuple[Path, Path]:
    """A one-node ONNX model (x -> op -> y) under /models/onnx_m/1/model.onnx, no op libraries."""
    repo = repository(root, {})
    (repo / "onnx_m" / "1").mkdir(parents=True)
    (repo / "onnx_m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    return repo, onnx_one_node(repo / "onnx_m" / "1" / "model.onnx", domain, op_type)


def onnx_one_node(path: Path, domain: str, op_type: str) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    tensor = onnx.TensorProto.FLOAT if domain != "ai.onnx.contrib" else onnx.TensorProto.STRING
    graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"], domain=domain)], "g",
                              [helper.make_tensor_value_info("x", tensor, [2])],
                              [helper.make_tensor_value_info("y", tensor, [2])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def session_error(model: Path) -> str:
    ok, message = really_loads(f"import onnxruntime as o\ntry:\n    o.InferenceSession({str(model)!r})\n"
                               "except Exception as exc:\n    raise SystemExit(str(exc))\n")
    return "" if ok else message


def test_an_onnx_model_using_a_domain_no_library_registers_fails_at_session_creation(real_root):
    package("onnxruntime")
    repo, model = onnx_model_repository(real_root, "labops.ai", "Twice")
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), ())
    (finding,) = [f for f in result.findings if f.code == "CO408"]
    assert finding.symbol == "labops.ai:Twice"
    assert finding.predicted in session_error(model)


def test_an_onnx_model_using_a_domain_built_into_onnxruntime_needs_no_library(real_root):
    package("onnxruntime")
    repo, model = onnx_model_repository(real_root, "com.microsoft", "Gelu")
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), ())
    assert not [f for f in result.findings if f.code == "CO408"]
    assert session_error(model) == ""


def extensions_library() -> Path:
    package("onnxruntime")
    origin = importlib.util.find_spec("onnxruntime_extensions")
    if origin is None:
        pytest.skip("onnxruntime-extensions is not installed")
    return next(Path(origin.origin).parent.glob("_extensions_pydll*.so"))  # type: ignore[arg-type]


def test_an_onnxruntime_probe_reports_the_domains_and_ops_a_published_library_registers(tmp_path):
    from customops.probe.frameworks import probe_load

    library = extensions_library()
    probed = probe_load(str(library), framework="onnxruntime", timeout=240)
    assert probed.status == "loaded" and "ai.onnx.contrib:StringUpper" in probed.registered
    assert all(":" in name for name in probed.registered)
    # Oracle: once the library is registered, a session using a reported op is created; one using an op of the
    # same domain that the probe did not report is not.
    register = ("import onnxruntime as o\ns = o.SessionOptions()\n"
                f"s.register_custom_ops_library({str(library)!r})\n")
    listed = onnx_one_node(tmp_path / "listed.onnx", "ai.onnx.contrib", "StringUpper")
    unlisted = onnx_one_node(tmp_path / "unlisted.onnx", "ai.onnx.contrib", "NoSuchUpper")
    assert really_loads(register + f"o.InferenceSession({str(listed)!r}, s)\n")[0]
    ok, message = really_loads(register + f"o.InferenceSession({str(unlisted)!r}, s)\n")
    assert not ok and "ai.onnx.contrib:NoSuchUpper(-1) is not a registered function/op" in message


def test_one_onnxruntime_op_library_registered_twice_in_one_session_fails_as_the_probe_sees(tmp_path):
    from customops.probe.frameworks import probe_group

    library = extensions_library()
    copy = tmp_path / library.name
    shutil.copy2(library, copy)
    first, second = probe_group((str(library), str(copy)), framework="onnxruntime", timeout=240)
    assert first.status == "loaded" and second.status == "failed"
    assert second.message == "creating a session: Domain already set in registry"
    # Oracle: the real ONNX Runtime, with both registered into one SessionOptions.
    identity = onnx_one_node(tmp_path / "identity.onnx", "", "Identity")
    ok, message = really_loads("import onnxruntime as o\ns = o.SessionOptions()\n"
                               f"s.register_custom_ops_library({str(library)!r})\n"
                               f"s.register_custom_ops_library({str(copy)!r})\n"
                               f"o.InferenceSession({str(identity)!r}, s)\n")
    assert not ok and "Domain already set in registry" in message


# check --probe: the real frameworks load the plan's op libraries in isolated child processes.

def probing(tmp_path: Path, python: str = sys.executable):  # type: ignore[no-untyped-def]
    from customops.probe.groups import ProbeSettings

    return ProbeSettings(python, None, timeout=240, cache_dir=tmp_path / "probe-cache")


def test_a_probe_confirms_that_a_second_torch_library_for_one_namespace_aborts(real_root, torch_ops, tmp_path):
    a, b = torch_ops / "liblabops_a.so", torch_ops / "liblabops_b.so"
    repo = pytorch_repository(real_root, [a, b])
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(real_root)), (),
                       probe=probing(tmp_path))
    (finding,) = co406(result)  # the static finding, with the probe's observation added
    assert finding.library.endswith(b.name)
    assert any("crashed when loaded after" in e and "SIGABRT" in e for e in finding.evidence), finding.evidence
    assert not really_loads(f"import torch; torch.ops.load_library({str(a)!r}); torch.ops.load_library({str(b)!r})")[0]


def test_a_probe_finds_ops_a_torchscript_model_calls_that_its_namespace_does_not_register(real_root, torch_ops,
                                                                                           tmp_path):
    frag = torch_ops / "liblabops_frag.so"  # defines labops::quad only; the model calls twice and add_one
    repo = pytorch_repository(real_root, [frag])
    model = torchscript_model(repo, torch_ops)
    manifest = load_manifest(str(repo / "customops.toml"))
    static = run_check([str(repo)], manifest, from_root(str(real_root)), ())
    assert not [f for f in static.findings if f.code == "CO408"]  # the namespace is registered: statically fine
    result = run_check([str(repo)], manifest, from_root(str(real_root)), (), probe=probing(tmp_path))
    (finding,) = [f for f in result.findings if f.code == "CO408"]
    proc = subprocess.run([sys.executable, "-c", f"import torch; torch.ops.load_library({str(frag)!r}); "
                           f"torch.jit.load({str(model)!r})"], capture_output=True, text=True, timeout=300)
    (message,) = [line for line in proc.stderr.splitlines() if line.startswith("Unknown builtin op: ")]
    assert message.split()[3].rstrip(".") in finding.evidence[0], (message, finding.evidence)


def test_a_probe_finds_an_onnx_op_that_the_models_library_does_not_register(real_root, tmp_path):
    library = extensions_library()
    repo = repository(real_root, {"onnx_m": ("onnxruntime", library)})
    model = onnx_one_node(repo / "onnx_m" / "1" / "model.onnx", "ai.onnx.contrib", "NoSuchUpper")
    out = subprocess.run([sys.executable, "-m", "customops", "check", str(repo), "--container-root", str(real_root),
                          "--probe", "--format", "json", "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=600)
    import json

    (finding,) = [f for f in json.loads(out.stdout)["findings"] if f["code"] == "CO408"]
    ok, message = really_loads("import onnxruntime as o\ns = o.SessionOptions()\n"
                               f"s.register_custom_ops_library({str(library)!r})\n"
                               f"o.InferenceSession({str(model)!r}, s)\n")
    assert not ok and finding["predicted"] in message
    onnx_one_node(model, "ai.onnx.contrib", "StringUpper")
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), (), probe=probing(tmp_path))
    assert not [f for f in result.findings if f.code == "CO408"]


def test_a_probe_confirms_that_one_onnxruntime_library_twice_in_a_model_fails_at_session_creation(real_root,
                                                                                                    tmp_path):
    library = extensions_library()
    repo = repository(real_root, {"onnx_m": ("onnxruntime", library)})
    place(library, repo / "onnx_m" / "ops2" / library.name)
    (repo / "onnx_m" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmodel_operations { op_library_filename: '
        f'"/models/onnx_m/ops/{library.name}" op_library_filename: "/models/onnx_m/ops2/{library.name}" }}\n')
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), (), probe=probing(tmp_path))
    (finding,) = co406(result)
    assert any("Domain already set in registry" in e for e in finding.evidence), finding.evidence


def test_a_probe_finds_tensorflow_ops_that_a_different_build_registers_again(real_root, tmp_path):
    ngrams = package("tensorflow_text") / "python" / "ops" / "_ngrams_op.so"
    rebuilt = tmp_path / "rebuilt" / ngrams.name
    rebuilt.parent.mkdir()
    rebuilt.write_bytes(ngrams.read_bytes() + b"\0another build")  # other content, same op
    repo = repository(real_root, {"tf_a": ("tensorflow", ngrams), "tf_b": ("tensorflow", rebuilt)})
    assert co406(run_check([str(repo)], load_manifest(None), from_root(str(real_root)), ())) == []
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), (), probe=probing(tmp_path))
    (finding,) = co406(result)
    assert finding.model == "tf_b" and finding.symbol == "TFText>NgramsStringJoin"
    assert finding.severity == Severity.ERROR
    real_ok, message = really_loads(
        "import tensorflow as tf\n"
        f"first = tf.load_op_library({str(ngrams)!r}); second = tf.load_op_library({str(rebuilt)!r})\n"
        "assert 'TFText_NgramsStringJoin' in set(dir(first)) - set(dir(second))\n")
    assert real_ok, message


def test_a_probe_without_the_framework_says_so_instead_of_guessing(real_root, torch_ops, tmp_path):
    bare = tmp_path / "bare-python"  # the same interpreter without site-packages: no torch
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    repo = pytorch_repository(real_root, [torch_ops / "liblabops_a.so"])
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(real_root)), (),
                       probe=probing(tmp_path, str(bare)))
    assert any(n.startswith("not probed: ") and "torch" in n for n in result.notes), result.notes
    assert not [f for f in result.findings if f.code in ("CO409", "CO507")]


def ngrams_saved_model(path: Path, ngrams: Path) -> Path:
    """A SavedModel joining bigrams with TensorFlow Text's published op (built with the library loaded)."""
    code = ("import tensorflow as tf\n"
            f"ngrams = tf.load_op_library({str(ngrams)!r})\n"
            "class M(tf.Module):\n"
            "    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])\n"
            "    def join(self, x):\n"
            "        return ngrams.TFText_NgramsStringJoin(input_values=x, input_row_splits=[tf.constant([0, 2], "
            "tf.int64)], width=2, axis=-1, string_separator=' ')[0]\n"
            f"tf.saved_model.save(M(), {str(path)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return path


def test_a_probe_finds_a_savedmodel_op_that_tensorflow_does_not_register_without_its_library(real_root, tmp_path):
    ngrams = package("tensorflow_text") / "python" / "ops" / "_ngrams_op.so"
    repo = repository(real_root, {})
    (repo / "tf_m" / "1").mkdir(parents=True)
    model = ngrams_saved_model(repo / "tf_m" / "1" / "model.savedmodel", ngrams)
    (repo / "tf_m" / "config.pbtxt").write_text('platform: "tensorflow_savedmodel"\n')
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), (), probe=probing(tmp_path))
    (finding,) = [f for f in result.findings if f.code == "CO408"]
    assert finding.symbol == "TFText>NgramsStringJoin"
    ok, message = really_loads(f"import tensorflow as tf\ntf.saved_model.load({str(model)!r})\n")
    assert not ok and finding.predicted in message
    # With the library listed for the model, the op is registered before the model loads.
    place(ngrams, repo / "tf_m" / "ops" / ngrams.name)
    (repo / "tf_m" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\n'
        f'model_operations {{ op_library_filename: "/models/tf_m/ops/{ngrams.name}" }}\n')
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), (), probe=probing(tmp_path))
    assert not [f for f in result.findings if f.code == "CO408"]
    ok, message = really_loads(f"import tensorflow as tf\ntf.load_op_library({str(ngrams)!r})\n"
                               f"m = tf.saved_model.load({str(model)!r})\n"
                               "assert m.join(tf.constant(['a', 'b'])).numpy().tolist() == [b'a b']\n")
    assert ok, message


def test_a_probe_reports_a_torch_op_library_whose_constructor_aborts(real_root, tree, tmp_path):
    aborts = tree / "probe" / "libaborts.so"  # loads cleanly as far as the linker goes; its constructor aborts
    repo = pytorch_repository(real_root, [aborts])
    manifest = load_manifest(str(repo / "customops.toml"))
    assert not [f for f in run_check([str(repo)], manifest, from_root(str(real_root)), ()).findings
                if f.level == Severity.ERROR]
    result = run_check([str(repo)], manifest, from_root(str(real_root)), (), probe=probing(tmp_path))
    (finding,) = [f for f in result.findings if f.code == "CO409"]
    assert "SIGABRT" in finding.message
    assert not really_loads(f"import torch; torch.ops.load_library({str(aborts)!r})")[0]


def test_a_probe_with_another_framework_version_than_the_container_says_so(real_root, torch_ops, tmp_path):
    from dataclasses import replace

    container = from_root(str(real_root))
    older = replace(container, facts=replace(container.facts, pytorch="2.6.0"))
    repo = pytorch_repository(real_root, [torch_ops / "liblabops_a.so"])
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), older, (), probe=probing(tmp_path))
    (finding,) = [f for f in result.findings if f.code == "CO507"]
    assert "2.6.0" in finding.message and finding.level == Severity.INFO
    same = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), container, (), probe=probing(tmp_path))
    assert not [f for f in same.findings if f.code == "CO507"]


def test_launch_with_probe_does_not_start_a_server_whose_onnx_model_uses_an_op_its_library_lacks(real_root, tmp_path):
    library = extensions_library()
    repo = repository(real_root, {"onnx_m": ("onnxruntime", library)})
    onnx_one_node(repo / "onnx_m" / "1" / "model.onnx", "ai.onnx.contrib", "NoSuchUpper")
    # The library imports Python symbols (see above): the deployment preloads libpython, from outside the
    # model repository (where every directory is a model).
    deploy = real_root / "deploy"
    libpython = real_container.place_libpython(real_root, deploy / "host")
    (deploy / "customops.toml").write_text(f'[host]\npreload = ["host/{libpython.name}"]\n')

    def launch(*options: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "customops", "launch", "--container-root", str(real_root),
                               "--manifest", str(deploy / "customops.toml"), "--dry-run", "--no-cache", *options,
                               "--", "tritonserver", "--model-repository=/models"],
                              capture_output=True, text=True, timeout=600, env={**os.environ, "CUSTOMOPS_CACHE_DIR":
                                                                                str(tmp_path / "cache")})

    assert launch().returncode == 0  # statically, nothing says the op is missing
    refused = launch("--probe")
    assert refused.returncode == 1 and "CO408" in refused.stderr and "NoSuchUpper" in refused.stderr
