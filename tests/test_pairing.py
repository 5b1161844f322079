"""Each linker outcome reaches the plan step it answers (customops.app.scenario.pair_outcomes), whatever ld.so
makes of the LD_PRELOAD value: an entry with a space becomes two entries, and entries already in the
environment come first; a finding then still names its own file, never the next step's."""

from __future__ import annotations

import shutil
from pathlib import Path

from customops.app.check import run_check
from customops.app.inherited import Inherited
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest


def _repository(tree: Path, tmp_path: Path, preloads: list[str]) -> tuple[Path, Path]:
    """A copy of the fixture container with /models/m (an onnxruntime model) and the libraries `preloads`
    names (each a copy of a loadable fixture library), preloaded through the manifest's [host] preload."""
    root = tmp_path / "root"
    shutil.copytree(tree / "container", root, symlinks=True)
    model = root / "models" / "m"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    (model / "1" / "model.bin").write_text("")
    for place in preloads:
        shutil.copy2(tree / "b" / "liba.so", root / "models" / place)
    listed = ", ".join(f'"{p}"' for p in preloads)
    (root / "models" / "customops.toml").write_text(f"[host]\npreload = [{listed}]\n")
    return root, root / "models"


def _check(root: Path, models: Path, extra_preload: str | None = None):  # type: ignore[no-untyped-def]
    manifest = load_manifest(str(models / "customops.toml"))
    container = from_root(str(root))
    inherited = Inherited(preload=extra_preload, preload_first=True)  # before customops' entries, as it was
    return run_check([str(models)], manifest, container, (), inherited=inherited)


def test_a_preload_path_with_a_space_does_not_shift_the_findings_onto_the_next_preload(tree, tmp_path):
    root, models = _repository(tree, tmp_path, ["m/lib spaced.so", "m/libgood.so"])
    result = _check(root, models)
    spaced, good = "/models/m/lib spaced.so", "/models/m/libgood.so"
    assert {step.path for step, _ in result.step_outcomes if step.preload} == {spaced, good}
    assert [o.request for step, o in result.step_outcomes if step.path == good] == [good]
    assert sorted(o.request for step, o in result.step_outcomes if step.path == spaced) == ["/models/m/lib",
                                                                                             "spaced.so"]
    about_preloads = [f for f in result.findings if f.library in (spaced, good)]
    assert {f.code for f in about_preloads} >= {"CO307", "CO301"}
    assert all(f.library == spaced for f in about_preloads), [(f.code, f.library) for f in about_preloads]
    assert all("spaced.so" in f.predicted or "/models/m/lib" in f.predicted
               for f in about_preloads if f.code == "CO301")


def test_the_environments_own_preload_entries_belong_to_no_step(tree, tmp_path):
    root, models = _repository(tree, tmp_path, ["m/libgood.so"])
    result = _check(root, models, extra_preload="/nonexistent/libother.so")
    assert [(step.path, o.request, o.status) for step, o in result.step_outcomes if step.preload] == [
        ("/models/m/libgood.so", "/models/m/libgood.so", "loaded")]
    assert not [f for f in result.findings if f.library == "/models/m/libgood.so" and f.code == "CO301"]
