"""The real Triton core as a test oracle, as tests/oracle.py is for ld.so.

`core()` is the directory of the core built by /work/shared/oracles/triton/build.sh (lib/libtritonserver.so,
bin/mini_tritonserver, backends/libtriton_{recommended,minimal,bls}.so): $CUSTOMOPS_TRITON_CORE when set, else
~/.cache/customops-oracles/triton, (re)built when missing or when its stamp (the sha256 of triton-src.tar.xz and
build.sh) differs from the shared sources; a directory built before stamps existed is accepted as it is. When it
cannot be built (not root, no build.sh, the build fails) the test is skipped with the reason.

`run(repository, backend_dir, *args)` runs mini_tritonserver where the repository is /models and the backend
directory /opt/tritonserver/backends, so the core's messages carry the paths customops predicts: in a private
mount namespace (`unshare -m`), onto a small root made of bind mounts (this machine's /usr and /proc, the core at
its own path, the repository and the backends at their container paths) and `chroot`. It returns every model's
(state, reason): the MODEL_INDEX line, plus the models and directories that never made it into the index (the
core's `Poll failed for model directory` and `failed to load` log lines).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from fixtures.real_container import place

SHARED = Path(os.environ.get("CUSTOMOPS_TRITON_SOURCES", "/work/shared/oracles/triton"))
DEFAULT = Path.home() / ".cache" / "customops-oracles" / "triton"
STAMP = ".customops-source-hash"
REPOSITORY = "/models"
BACKENDS = "/opt/tritonserver/backends"
PRODUCTS = ("lib/libtritonserver.so", "bin/mini_tritonserver", "backends/libtriton_minimal.so")

INDEX = re.compile(r"^MODEL_INDEX (.*)$", re.M)
# E1203 19:26:19.794158 17412 model_repository_manager.cc:1234] "Poll failed for model directory 'm': ..."
POLL = re.compile(r'^E\S+ \S+ \d+ \S+\] "Poll failed for model directory \'(.+?)\': (.*)"$', re.M)
FAILED = re.compile(r'^E\S+ \S+ \d+ \S+\] "failed to load \'(.+?)\' version (\S+): (.*)"$', re.M)
# failed to load model 'm': ...; failed to poll model 'ghost': ... (explicit mode); an ensemble's own check
MODEL = re.compile(r'^E\S+ \S+ \d+ \S+\] "(failed to (?:load|poll) model \'(.+?)\': (.*))"$', re.M)
ENSEMBLE = re.compile(r"""^E\S+ \S+ \d+ \S+\] "((?:\w+ )*\w+: ensemble '?([^'\s]+)'? .*)"$""", re.M)
LOG_PREFIX = re.compile(r'^[IWE]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] "?')


class Crashed(Exception):
    """The core aborted before it listed the models (an uncaught C++ exception): no model is served."""


def source_hash() -> str:
    h = hashlib.sha256()
    for name in ("triton-src.tar.xz", "build.sh"):
        h.update((SHARED / name).read_bytes())
    return h.hexdigest()[:12]


def _built(out: Path) -> bool:
    return all((out / p).is_file() for p in PRODUCTS)


def _why_not_built(out: Path, want: str | None) -> str | None:
    """Build the core into `out`; the reason it cannot be, or None."""
    if os.geteuid() != 0:
        return f"the Triton core is not built at {out} and building it needs root (apt-get)"
    if want is None:
        return f"the Triton core is not built at {out} and {SHARED / 'build.sh'} is missing"
    log = out.parent / f"{out.name}-build.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        steps = [["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "libgtest-dev"],
                 ["bash", str(SHARED / "build.sh"), str(out)]]
        for step in steps:
            done = subprocess.run(step, stdout=f, stderr=subprocess.STDOUT,
                                  env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
            if done.returncode != 0:
                f.flush()
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                return f"building the Triton core failed ({shlex.join(step)}, log {log}):\n{tail}"
    (out / STAMP).write_text(want + "\n")
    return None


def core() -> Path:
    """The oracle's directory, built when missing or stale; skips the test when it cannot be built. Test
    workers share one build: the first builds under a lock, the others wait for it."""
    if os.environ.get("CUSTOMOPS_TRITON_CORE"):
        out = Path(os.environ["CUSTOMOPS_TRITON_CORE"])
        if _built(out):
            return out
    else:
        out = DEFAULT
    why = _NOT_READY.get(out)
    if why is None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out.parent / f"{out.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                why = _NOT_READY[out] = _why_not_ready(out) or ""
        except OSError as exc:
            why = _NOT_READY[out] = f"the Triton core cannot be built at {out}: {exc}"
    if why:
        pytest.skip(why)
    return out


_NOT_READY: dict[Path, str] = {}  # per test process: why the core is not there ("" when it is), tried once


def _why_not_ready(out: Path) -> str | None:
    """Build the core into `out` when it is missing or built from other sources; the reason it cannot be."""
    want = source_hash() if (SHARED / "build.sh").is_file() and (SHARED / "triton-src.tar.xz").is_file() else None
    if _built(out):
        stamp = out / STAMP
        if want is None or not stamp.exists():  # no sources to compare with, or built before stamps existed
            return None
        if stamp.read_text().strip() == want:
            return None
        # stale: build.sh extracts the sources and builds the products only when they are missing
        shutil.rmtree(out / "src", ignore_errors=True)
        for product in [*PRODUCTS, *(str(p.relative_to(out)) for p in out.glob("backends/*.so"))]:
            (out / product).unlink(missing_ok=True)
    return _why_not_built(out, want)


LDD = re.compile(r"^\s*(?:\S+ => )?(/\S+) \(0x", re.M)


def server_root(root: Path) -> None:
    """Lay the real server into a container root: mini_tritonserver as /opt/tritonserver/bin/tritonserver, the
    real libtritonserver.so beside it, and every library ldd finds for them and the example backends (this
    machine's glibc, libstdc++, protobuf, ...) at the same paths and in the same merged-/usr layout, so
    customops sees the server that the core oracle runs."""
    out = core()
    for link in ("lib", "lib64", "bin", "sbin"):
        if os.path.islink(f"/{link}") and not os.path.lexists(root / link):
            root.mkdir(parents=True, exist_ok=True)
            (root / link).symlink_to(os.readlink(f"/{link}"))
    server = root / "opt/tritonserver/bin/tritonserver"
    place(out / "bin" / "mini_tritonserver", server)
    place(out / "lib" / "libtritonserver.so", root / "opt/tritonserver/lib/libtritonserver.so")
    users = [out / "bin" / "mini_tritonserver", *sorted((out / "backends").glob("*.so"))]
    needed = set()
    for user in users:
        listed = subprocess.run(["ldd", str(user)], capture_output=True, text=True, check=True).stdout
        needed |= {Path(p) for p in LDD.findall(listed) if not p.startswith(str(out))}
    for library in needed:  # the library's name in its real directory (/lib -> usr/lib)
        place(library.resolve(), root / os.path.realpath(library.parent).lstrip("/") / library.name)


def can_isolate() -> str | None:
    """Why the server cannot be run in a private mount namespace and chroot here, or None."""
    if os.geteuid() != 0:
        return "running the core at /models needs root (unshare -m, mount --bind, chroot)"
    for tool in ("unshare", "chroot", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    from oracle import why_no_mount_namespace  # / must be a mount point (not so in a plain chroot)

    return why_no_mount_namespace()


Repositories = str | Path | Sequence[tuple[str | Path, str]]


def run(repository: Repositories, backend_dir: str | Path, *args: str,
        timeout: float = 60, env: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Run mini_tritonserver on `repository` (a host directory, seen at /models; or (host, container path)
    pairs, each passed as --model-repository) with `backend_dir` at /opt/tritonserver/backends, and return
    every model (or, for a directory the core could not poll, that directory's name) -> (state, reason)."""
    return parse(output(repository, backend_dir, *args, timeout=timeout, env=env))


def output(repository: Repositories, backend_dir: str | Path, *args: str, timeout: float = 60,
           env: dict[str, str] | None = None) -> str:
    """The server's whole output; `env`: variables set for it alone (LD_PRELOAD, as launch sets it)."""
    why = can_isolate()
    if why:
        pytest.skip(why)
    out = core()
    pairs = [(Path(repository), REPOSITORY)] if isinstance(repository, (str, Path)) else \
        [(Path(h), c) for h, c in repository]
    if len(pairs) > 1 and not _takes_several_repositories():
        pytest.skip("mini_tritonserver takes one --model-repository (the last given wins), so the core's rules "
                    "across several repositories cannot be observed with it")
    with tempfile.TemporaryDirectory(prefix="triton-core-root-") as tmp:
        root = Path(tmp)
        binds = [("/usr", "/usr"), ("/proc", "/proc"), ("/dev", "/dev"), (str(out), str(out))]
        binds += [(str(h), c) for h, c in pairs] + [(str(backend_dir), BACKENDS)]
        for _, inside in binds:
            (root / inside.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for link in ("lib", "lib64", "bin", "sbin"):  # merged /usr, as on this machine
            if os.path.islink(f"/{link}"):
                (root / link).symlink_to(os.readlink(f"/{link}"))
        (root / "tmp").mkdir(exist_ok=True)
        script = ["mount --make-rprivate /"]
        script += [f"mount --rbind {shlex.quote(h)} {shlex.quote(str(root) + c)}" for h, c in binds]
        server = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
        server += [str(out / "bin" / "mini_tritonserver")] + [f"--model-repository={c}" for _, c in pairs]
        server += [f"--backend-directory={BACKENDS}", *args]
        script.append(f"exec chroot {shlex.quote(str(root))} {shlex.join(server)}")
        try:
            done = subprocess.run(["unshare", "-m", "sh", "-ec", " && ".join(script)], capture_output=True,
                                  text=True, errors="replace", timeout=timeout,
                                  env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"mini_tritonserver ran past {timeout}s: {e.stdout!r} {e.stderr!r}") from e
    return done.stdout + done.stderr


def _takes_several_repositories() -> bool:
    source = SHARED / "mini_tritonserver.cc"
    return source.is_file() and "repo = v;" not in source.read_text(errors="replace")


def unescape(text: str) -> str:
    """The core logs its messages as JSON-ish strings: \\" and \\\\ escaped."""
    return text.replace('\\"', '"').replace("\\\\", "\\")


def parse(text: str) -> dict[str, tuple[str, str]]:
    found = INDEX.search(text)
    if found is None and "terminate called" in text:
        raise Crashed(text.strip().splitlines()[-1] if text.strip() else "")
    if found is None:
        raise AssertionError(f"no MODEL_INDEX line in mini_tritonserver's output:\n{text[-3000:]}")
    states: dict[str, tuple[str, str]] = {}
    for entry in json.loads(found.group(1)):
        name, state, reason = entry["name"], entry.get("state") or "UNAVAILABLE", entry.get("reason", "")
        if name in states:  # several versions: the model is available when one of them is
            old_state, old_reason = states[name]
            state = "READY" if "READY" in (state, old_state) else state
            reason = "\n".join(r for r in (old_reason, reason) if r)
        states[name] = (state, reason)
    for match in FAILED.finditer(text):
        name, reason = match.group(1), unescape(match.group(3))
        state, known = states.get(name, ("UNAVAILABLE", ""))
        if reason not in known:
            states[name] = (state, "\n".join(r for r in (known, reason) if r))
    for match in MODEL.finditer(text):
        _add(states, match.group(2), unescape(match.group(3)))
    for match in ENSEMBLE.finditer(text):
        _add(states, match.group(2), unescape(match.group(1)))
    for match in POLL.finditer(text):
        name = match.group(1)
        if not states.get(name, ("", ""))[1]:
            states[name] = ("UNAVAILABLE", unescape(match.group(2)))
    return states


def _add(states: dict[str, tuple[str, str]], name: str, reason: str) -> None:
    """A model that failed (its reason in a log line): unavailable, the reason added to those it has."""
    state, known = states.get(name, ("UNAVAILABLE", ""))
    if state != "READY" and reason not in known:
        states[name] = ("UNAVAILABLE", "\n".join(r for r in (known, reason) if r))


def errors(text: str) -> list[str]:
    """The core's error lines (E...), without their log prefixes: for messages about no model."""
    return [unescape(LOG_PREFIX.sub("", line).rstrip('"')) for line in text.splitlines() if line.startswith("E")]
