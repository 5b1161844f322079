"""The oracle: run the fixture loader (fixtures/src/loader.c) under the real ld.so and record what it did.

`run_oracle` takes the same Scenario the model takes, so a test states a scenario once and compares
the model's prediction with ld.so's own LD_DEBUG=libs,bindings,versions output and dlerror() text.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from customops.elf.cache import ElfReader
from customops.linker.messages import lazy_failure_messages
from customops.linker.prediction import Prediction
from customops.linker.process import Linker
from customops.linker.types import FailureKind, Scenario
from customops.report.resolve import INTERPRETER, PRELOADED, load_trees

BINDING = re.compile(r"binding file (.+?) \[\d+\] to (.+?) \[\d+\]: (?:normal|protected) symbol `(.+?)'(?: \[(.+?)\])?")
TRYING = re.compile(r"^\s+trying file=(.+)$")
FIND = re.compile(r"find library=(.+?) \[\d+\]; searching")
DLOPEN = re.compile(r"^dlopen (.+?): (ok|error: (.*))$")
CALL = re.compile(r"^call (.+?): (error: (.*)|-?\d+)$")
# LD_DEBUG=files: who asked for a name, and that the name became a new object
NEEDED = re.compile(r"^file=(.+?) \[\d+\];\s+needed by (.+?) \[\d+\]$")
DLOPENED = re.compile(r"^file=(.+?) \[\d+\];\s+dynamically loaded by ")
MAPPED = re.compile(r"^file=(.+?) \[\d+\];\s+generating link map$")
# LD_DEBUG=libs: the search list being tried, "(RPATH from file X)", "(LD_LIBRARY_PATH)", "(system search path)"
SEARCH_PATH = re.compile(r"^ search path=.*\t\t\((\w+)")
SEARCH_CACHE = re.compile(r"^ search cache=")


@dataclass
class OracleRun:
    returncode: int
    stdout: str
    stderr: str
    debug: str
    bindings: dict[tuple[str, str], tuple[str, str | None]] = field(default_factory=dict)
    dlopens: list[tuple[str, str | None]] = field(default_factory=list)  # (path, error or None)
    calls: list[tuple[str, str]] = field(default_factory=list)
    tried: dict[str, list[str]] = field(default_factory=dict)  # library name -> files tried, in order
    # every new object a NEEDED entry or preload brought in: (the dlopen it came with, or None at startup;
    # needed by, name, file, the kind of search list that found it)
    loads: list[tuple[str | None, str, str, str, str | None]] = field(default_factory=list)

    def error_of(self, path: str) -> str | None:
        return next(err for p, err in self.dlopens if p == path)


def argv_for(scenario: Scenario) -> list[str]:
    argv = [scenario.executable]
    for step in scenario.steps:
        if step.lazy:
            argv.append("--lazy")
        if step.make_global:
            argv.append("--global")
        if step.deepbind:
            argv.append("--deepbind")
        argv.append(step.path)
        for call in step.calls:
            argv += ["--call", call]
    return argv


def run_oracle(scenario: Scenario) -> OracleRun:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    e = scenario.environment
    if e.library_path is not None:
        env["LD_LIBRARY_PATH"] = e.library_path
    if e.preload is not None:
        env["LD_PRELOAD"] = e.preload
    if e.bind_now:
        env["LD_BIND_NOW"] = "1"
    if e.dynamic_weak:
        env["LD_DYNAMIC_WEAK"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        env["LD_DEBUG"] = "libs,bindings,versions,files"
        env["LD_DEBUG_OUTPUT"] = os.path.join(tmp, "ld")
        proc = subprocess.run(argv_for(scenario), env=env, cwd=e.cwd, capture_output=True, text=True, timeout=60)
        debug = "".join(p.read_text(errors="replace") for p in sorted(Path(tmp).glob("ld*")))
    run = OracleRun(proc.returncode, proc.stdout, proc.stderr, debug)
    parse_ld_debug(debug, run)
    for line in proc.stdout.splitlines():
        if m := DLOPEN.match(line):
            run.dlopens.append((m.group(1), m.group(3)))
        elif m := CALL.match(line):
            run.calls.append((m.group(1), m.group(3) or m.group(2)))
    return run


def run_with_ld_debug(argv: list[str], env: dict[str, str] | None = None) -> OracleRun:
    """Any program (a real python importing torch, say) under LD_DEBUG=libs,bindings."""
    with tempfile.TemporaryDirectory() as tmp:
        full_env = {**(env or {}), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LD_DEBUG": "libs,bindings",
                    "LD_DEBUG_OUTPUT": os.path.join(tmp, "ld")}
        proc = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=600)
        debug = "".join(p.read_text(errors="replace") for p in sorted(Path(tmp).glob("ld*")))
    run = OracleRun(proc.returncode, proc.stdout, proc.stderr, "")
    parse_ld_debug(debug, run)
    return run


def parse_ld_debug(debug: str, run: OracleRun) -> None:
    current: str | None = None
    needed_by: dict[str, str] = {}
    kind: str | None = None
    step: str | None = None
    for line in debug.splitlines():
        text = line.split(":", 1)[1] if ":" in line and line.split(":", 1)[0].strip().isdigit() else line
        text = text[1:] if text.startswith("\t") else text
        if m := BINDING.search(text):
            run.bindings.setdefault((m.group(1), m.group(3)), (m.group(2), m.group(4)))
        elif m := FIND.search(text):
            current, kind = m.group(1), None
            run.tried.setdefault(current, [])
        elif (m := TRYING.match(text)) and current is not None:
            run.tried[current].append(m.group(1))
        elif m := SEARCH_PATH.match(text):
            kind = m.group(1)
        elif SEARCH_CACHE.match(text):
            kind = "cache"
        elif m := NEEDED.match(text):
            needed_by[m.group(1)] = m.group(2)
        elif m := DLOPENED.match(text):
            step = m.group(1)
        elif (m := MAPPED.match(text)) and m.group(1) in needed_by:
            name = m.group(1)
            searched = "/" not in name and bool(run.tried.get(name))
            run.loads.append((step, needed_by.pop(name), name, run.tried[name][-1] if searched else name,
                              kind if searched else None))


def relocated_names(path: str) -> set[bytes]:
    """Names the object has relocations for: only these are bindings; ld.so's other LD_DEBUG lines
    (its own malloc lookups in the executable's name, dlsym) are not relocations."""
    info = ElfReader(use_cache=False).read(path)
    indices = np.flatnonzero(info.symbols.reloc_class)
    return set(info.symbols.names(indices))


def compare_bindings(prediction: Prediction, oracle: OracleRun, only=None, by_file: bool = False) -> int:  # type: ignore[no-untyped-def]
    """Every relocation binding ld.so made, in every object of the process (libc and ld.so included),
    must be the one the model predicted (or those of the referrers `only` accepts). With `by_file`,
    the definer is compared as a file rather than by the name it was opened under: a real process may
    have reached the same file earlier through another path. Returns how many were compared."""
    compared = 0
    relocated: dict[str, set[bytes]] = {}
    for (referrer, symbol), (definer, version) in oracle.bindings.items():
        if only is not None and not only(referrer):
            continue
        if not os.path.isfile(referrer):
            continue  # linux-vdso.so.1: mapped by the kernel, not a file the loader opens
        if referrer not in relocated:
            relocated[referrer] = relocated_names(referrer)
        if symbol.encode() not in relocated[referrer]:
            continue
        predicted = prediction.binding(referrer, symbol)
        assert predicted is not None, f"model has no binding for {symbol} in {referrer}; ld.so bound it to {definer}"
        assert predicted.winner is not None, f"model left {symbol} in {referrer} unresolved; ld.so used {definer}"
        same = (os.path.realpath(predicted.winner.object) == os.path.realpath(definer)) if by_file \
            else predicted.winner.object == definer
        assert same, (
            f"{symbol} referenced by {referrer}: ld.so bound it to {definer}, model predicted {predicted.winner.object}"
        )
        assert predicted.version == version, f"{symbol} in {referrer}: ld.so looked up version {version}"
        compared += 1
    return compared


def _normalise(message: str) -> str:
    """ld.so's assertion text carries a source line number that differs between glibc builds."""
    return re.sub(r"dl-lookup\.c: \d+: ", "dl-lookup.c: ", message)


def agree(linker: Linker, scenario: Scenario) -> tuple[Prediction, OracleRun]:
    """Run the model and the real loader on one scenario and assert that they agree on everything
    ld.so reports: each dlopen's success or dlerror() text, the preload warnings, whether and how the
    process died, the functions called, and every relocation binding. Scenario tests then assert the
    rule itself on the returned prediction."""
    prediction = linker.run(scenario)
    oracle = run_oracle(scenario)
    stderr = [line for line in oracle.stderr.splitlines() if line.strip()]
    warnings = [line for line in stderr if line.startswith("ERROR: ld.so:")]
    fatal = [line for line in stderr if not line.startswith("ERROR: ld.so:")]
    predicted_warnings = [w for o in prediction.outcomes if o.kind == "preload" for w in o.warnings]
    assert predicted_warnings == warnings
    lazy = [m for o in prediction.outcomes for m in lazy_failure_messages(o, scenario.executable)]
    if fatal and prediction.exit_message is None:
        assert fatal[-1] in lazy, f"ld.so died: {fatal[-1]}; the model predicted no such death"
    elif fatal:
        assert _normalise(prediction.exit_message) == _normalise(fatal[-1])
    else:
        assert prediction.exit_message is None, f"model predicted death: {prediction.exit_message}"
    dlopens = [o for o in prediction.outcomes if o.kind == "dlopen"]
    for (path, error), outcome in zip(oracle.dlopens, dlopens, strict=False):
        assert outcome.request == path
        assert (None if outcome.ok else outcome.message) == error
    if not fatal:
        assert len(dlopens) == len(oracle.dlopens)
    predicted_calls = [c for o in dlopens for c in o.calls][:len(oracle.calls)]
    assert [name for name, _ in oracle.calls] == [c.symbol for c in predicted_calls]
    for (_name, value), call in zip(oracle.calls, predicted_calls, strict=True):
        assert (call.status == "ok") == value.lstrip("-").isdigit()
    # ld.so maps part of a failing step's tree before it gives up: the model shows what a step that loads loaded
    failed = {o.request if o.kind == "dlopen" else None for o in prediction.outcomes
              if not o.ok and o.kind != "preload"}
    assert model_loads(prediction) == [load for load in oracle.loads if load[0] not in failed]
    compared = compare_bindings(prediction, oracle)
    assert compared > 0 or not any(os.path.isfile(referrer) for referrer, _ in oracle.bindings)
    assert_same_as_per_symbol(linker, scenario, prediction)
    assert_same_tree_without_binding(linker, scenario, prediction)
    return prediction, oracle


def model_loads(prediction: Prediction) -> list[tuple[str | None, str, str, str, str | None]]:
    """The objects `resolve` shows under each step (report.resolve.load_trees), as ld.so's LD_DEBUG=files,libs
    tells them: who needed each, the name asked for, the file, and the kind of search list that found it.
    (Only the kind: ld.so labels a directory with the object that first put it on any search list.)"""
    kinds = {"RPATH": "RPATH", "RUNPATH": "RUNPATH", "LD_LIBRARY_PATH": "LD_LIBRARY_PATH", "ld.so.cache": "cache",
             "system": "system"}
    loads = []
    for outcome, tree in zip(prediction.outcomes, load_trees(prediction), strict=True):
        if outcome.ok:
            order = {path: i for i, path in enumerate(outcome.loaded)}  # ld.so tells them in load order
            rows = sorted(tree, key=lambda row: order[row.path])
            loads += [(outcome.request if outcome.kind == "dlopen" else None, row.needed_by, row.name, row.path,
                       kinds.get(row.found_by.removeprefix(f"{PRELOADED}, found by ").split(" ")[0]))
                      for row in rows if row.found_by != INTERPRETER]
    return loads


def assert_same_as_per_symbol(linker: Linker, scenario: Scenario, prediction: Prediction) -> None:
    """The batch decisions (customops.linker.batch), with and without its per-symbol path for small objects,
    equal the readable one-symbol-at-a-time lookup (`Linker(..., batch=False)`) for every relocation, losers
    included (ld.so's LD_DEBUG output names only the winners, so this is their oracle), and every outcome,
    object and message is the same."""
    slow = Linker(linker.target, linker.reader, batch=False).run(scenario)
    # the fixtures' small objects take the per-symbol path of the batch too (Linker's `few`): in bulk as well
    for batch in (prediction, Linker(linker.target, linker.reader, few=0).run(scenario)):
        assert slow.outcomes == batch.outcomes
        assert slow.objects == batch.objects
        assert (slow.global_scope, slow.exit_message) == (batch.global_scope, batch.exit_message)
        keys = {(b.referrer, b.symbol) for b in batch.bindings()} | {(b.referrer, b.symbol) for b in slow.bindings()}
        for referrer, symbol in keys:
            assert batch.binding(referrer, symbol) == slow.binding(referrer, symbol), (referrer, symbol)


SYMBOL_FAILURES = {FailureKind.UNDEFINED_SYMBOL, FailureKind.LOOKUP_ASSERTION}


def assert_same_tree_without_binding(linker: Linker, scenario: Scenario, prediction: Prediction) -> None:
    """resolve --tree-only (a reader without relocations: nothing is bound) predicts every step's status,
    message, warnings, dlsym calls and load tree as the full model does, up to the first step a symbol
    decides; with no such step, the same steps."""
    tree = Linker(linker.target, ElfReader(use_cache=False, relocations=False)).run(scenario)
    assert not tree.raw_bindings
    steps = zip(prediction.outcomes, tree.outcomes, load_trees(prediction), load_trees(tree), strict=False)
    for full, alone, full_rows, alone_rows in steps:
        if full.unresolved or full.lazy_failures or (full.failure and full.failure.kind in SYMBOL_FAILURES):
            return
        assert (alone.kind, alone.request, alone.status, alone.message, alone.warnings, alone.loaded,
                alone.searches, alone.version_errors, alone.calls) == (
            full.kind, full.request, full.status, full.message, full.warnings, full.loaded, full.searches,
            full.version_errors, full.calls)
        assert alone_rows == full_rows
    assert len(tree.outcomes) == len(prediction.outcomes)


@functools.cache
def why_no_mount_namespace() -> str | None:
    """Why a private mount namespace (`unshare --mount`, which makes / private first) cannot be made here, or
    None: not root, no unshare, or / not a mount point (a chroot into a plain directory), where the real
    loader and the Triton core cannot be run inside a container root and the tests that need them skip."""
    if os.geteuid() != 0:
        return "needs root: the real loader runs chrooted in a private mount namespace"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux): the real loader runs chrooted in a private mount namespace"
    done = subprocess.run(["unshare", "--mount", "--fork", "true"], capture_output=True, text=True)
    if done.returncode != 0:
        return (f"`unshare --mount` cannot make a private mount namespace here ({done.stderr.strip()}; e.g. a chroot "
                "whose / is not a mount point: bind-mount the root onto itself before chrooting)")
    return None


def run_in_container(root: str, plan, extra_env: dict[str, str] | None = None,  # type: ignore[no-untyped-def]
                     cwd: str = "/opt/tritonserver", program: str = "/opt/tritonserver/bin/tritonserver") -> OracleRun:
    """The container's tritonserver (the fixture loader) performs the plan's loads inside `root`, started in
    `cwd` (the NGC images' working directory): in a private mount namespace, chrooted, with /proc bound in (ld.so
    needs /proc/self/exe for $ORIGIN). Skips the test where no such namespace can be made
    (why_no_mount_namespace)."""
    why = why_no_mount_namespace()
    if why:
        pytest.skip(why)
    argv = [program]  # the server, or another program that loads as it does (the Python backend's stub)
    for step in plan.dlopens:
        argv.append(step.path)
        for entry in step.entry_points:
            argv += ["--call", entry]
    env = {"PATH": "/usr/bin:/bin"}
    if plan.ld_preload:
        env["LD_PRELOAD"] = plan.ld_preload
    if plan.library_path:
        env["LD_LIBRARY_PATH"] = ":".join(plan.library_path)
    env.update(extra_env or {})
    os.makedirs(os.path.join(root, "proc"), exist_ok=True)
    # The environment goes only to the final execve inside the chroot, never to the host's helpers.
    enter = (f"import json, os, sys; os.chroot(sys.argv[1]); os.chdir({cwd!r}); "
             "os.execve(sys.argv[3], sys.argv[3:], json.loads(sys.argv[2]))")
    script = 'mount --bind /proc "$1/proc" && exec "$0" -c "$2" "$1" "$3" "$4" "${@:5}"'
    proc = subprocess.run(["unshare", "--mount", "--fork", "bash", "-c", script, sys.executable, root, enter,
                           json.dumps(env), *argv], capture_output=True, text=True, timeout=120)
    run = OracleRun(proc.returncode, proc.stdout, proc.stderr, "")
    for line in proc.stdout.splitlines():
        if m := DLOPEN.match(line):
            run.dlopens.append((m.group(1), m.group(3)))
        elif m := CALL.match(line):
            run.calls.append((m.group(1), m.group(3) or m.group(2)))
    return run


def confirm_check(result, root: str) -> OracleRun:  # type: ignore[no-untyped-def]
    """Every load the check predicted, confirmed by the real loader inside the container: each dlopen's
    success or dlerror() text, each entry point found or not, the preload warnings, a fatal start."""
    oracle = run_in_container(root, result.plan)
    prediction = result.prediction
    stderr = [line for line in oracle.stderr.splitlines() if line.strip()]
    warnings = [line for line in stderr if line.startswith("ERROR: ld.so:")]
    fatal = [line for line in stderr if not line.startswith("ERROR: ld.so:")]
    assert [w for o in prediction.outcomes if o.kind == "preload" for w in o.warnings] == warnings
    if fatal:
        assert prediction.exit_message == fatal[-1]
        return oracle
    assert prediction.exit_message is None
    dlopens = [o for o in prediction.outcomes if o.kind == "dlopen"]
    assert [(o.request, None if o.ok else o.message) for o in dlopens] == oracle.dlopens
    predicted_calls = [(c.symbol, None if c.status == "ok" else c.message) for o in dlopens for c in o.calls]
    assert predicted_calls == [(name, None if value.lstrip("-").isdigit() else value) for name, value in oracle.calls]
    return oracle
