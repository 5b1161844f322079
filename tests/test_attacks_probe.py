"""Attacks by a probed library: its constructor is hostile code, and none of it may reach the checker.

Each test builds a tiny library with gcc whose constructor makes one attack, probes it through the real
code (`probe_group` in a checker process of its own, so that an attack that succeeds kills that process and
not the test run; `customops probe` and `check --probe` where the CLI is the point), and asserts that the
attack failed and the checker lived to give a sane verdict.

Modes: "as-is" (this interpreter, as the current user: root here and in CI), "other-uid" (as root, with an
interpreter uid 65534 can run: the loader switches to it), "non-root" (the checker itself as uid 65534: a
user namespace), "landlock-only" (no namespaces: what a container that forbids them gets) and "bare" (no
namespaces, no Landlock, no uid switch: what a machine that allows none of them gets; the report must say
what a library could then do).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from customops import cachedir
from customops.probe import frameworks as probe
from customops.probe import groups as probes
from customops.probe.groups import ProbeSettings
from customops.probe.results import ProbeResult, ProbeStatus
from customops.triton.plan import LoadPlan

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"
TOKEN = "customops-attack-target-" + secrets.token_hex(6)  # only the checker's command line holds it
SECRET = "s3cret-" + secrets.token_hex(8)  # in the checker's environment only
IS_ROOT = os.geteuid() == 0

CHECKER = r"""
import json, mmap, os, sys
config = json.loads(sys.argv[2])
from customops.probe import sandbox
from customops.probe.frameworks import probe_group
if config["layers"] is not None:
    sandbox.LAYERS = frozenset(config["layers"])
maps = [mmap.mmap(os.open(path, os.O_RDONLY), 0, prot=mmap.PROT_READ) for path in config["map"]]
results = probe_group(tuple(config["libraries"]), timeout=config["timeout"])
touched = sum(m[i] for m in maps for i in range(0, len(m), 4096))  # SIGBUS here if a mapped file shrank
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(json.dumps({"results": [r.__dict__ for r in results], "tracer": int(status["TracerPid"]),
                  "peak_kb": int(status["VmHWM"].split()[0]), "touched": touched}))
"""

PRELUDE = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static char cmdline[1 << 16];

/* Every process this one can see whose command line holds TOKEN: the checker, if it is visible. */
static int targets(pid_t *found, int most) {
    int n = 0;
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    while (proc && (entry = readdir(proc)) && n < most) {
        char path[64];
        pid_t pid = atoi(entry->d_name);
        if (pid <= 0 || pid == getpid()) continue;
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t length = read(fd, cmdline, sizeof cmdline - 1);
        close(fd);
        if (length <= 0) continue;
        for (ssize_t i = 0; i < length; i++) if (!cmdline[i]) cmdline[i] = ' ';
        cmdline[length] = 0;
        if (strstr(cmdline, TOKEN)) found[n++] = pid;
    }
    if (proc) closedir(proc);
    return n;
}

static const char *self_path(void) {
    static Dl_info info;
    dladdr((void *)self_path, &info);
    return info.dli_fname;
}
"""


@dataclass(frozen=True)
class Mode:
    name: str
    python: str  # the checker's interpreter, which also probes
    as_nobody: bool = False  # the checker runs as uid 65534
    layers: tuple[str, ...] | None = None  # sandbox.LAYERS; None: all


MODES = {
    "as-is": Mode("as-is", sys.executable),
    "other-uid": Mode("other-uid", SYSTEM_PYTHON),
    "non-root": Mode("non-root", SYSTEM_PYTHON, as_nobody=True),
    "landlock-only": Mode("landlock-only", sys.executable, layers=("landlock",)),
    "bare": Mode("bare", sys.executable, layers=()),
}


@functools.cache
def system_python_runs_customops() -> bool:
    """Whether uid 65534 can run customops from this checkout with SYSTEM_PYTHON: not where a directory above
    the checkout is closed to others (a clone in a 0700 home, as /root is on Debian)."""
    if not os.access(SYSTEM_PYTHON, os.X_OK) or not shutil.which("setpriv"):
        return False
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if IS_ROOT else []
    check = subprocess.run([*as_nobody, SYSTEM_PYTHON, "-c", "import customops.probe.frameworks"],
                           env={"PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}, cwd="/", capture_output=True)
    return check.returncode == 0


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest) -> Mode:
    chosen = MODES[request.param]
    if chosen.python == SYSTEM_PYTHON:
        if not IS_ROOT:
            pytest.skip("needs root: it runs the checker or the probe as uid 65534")
        if not shutil.which("setpriv") or not system_python_runs_customops():
            pytest.skip(f"needs setpriv and a {SYSTEM_PYTHON} that uid 65534 can run customops with from {ROOT} "
                        "(every directory above it searchable by others: not so in a 0700 home)")
    return chosen


@functools.cache
def claimed(mode_name: str) -> str:
    """What the report says a library could and could not do in this mode on this machine."""
    base = reachable_directory("customops-attacks-claims-")
    try:
        (base / "libs").mkdir(mode=0o755)
        (base / "tmp").mkdir(mode=0o1777)
        (base / "tmp").chmod(0o1777)
        (base / "home").mkdir()
        library = base / "libs" / "libplain.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), "-x", "c", "-"], input="int plain;\n",
                       text=True, check=True)
        checked = check(MODES[mode_name], base, str(library))
        alive(checked)
        return str(checked.results[0]["containment"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def requires(mode: Mode, claim: str) -> None:
    """Skip an attack that this mode, on this machine, does not claim to stop: the report says so instead
    (test_the_report_says_what_a_library_could_do_without_containment). Where it is claimed, the attack
    must fail."""
    if claim not in claimed(mode.name):
        pytest.skip(f"{mode.name}: probes here do not claim '{claim}': {claimed(mode.name)}")


def reachable_directory(prefix: str) -> Path:
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    base.chmod(0o755)
    return base


@pytest.fixture(scope="module")
def compiled() -> Iterator[Path]:
    """Each attack library built once, for every mode (a test that changes its library uses a copy)."""
    directory = reachable_directory("customops-attack-libs-")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def place(compiled: Path) -> Iterator[Path]:
    """A directory uid 65534 can reach: libraries, the checker's TMPDIR and HOME, and a world-writable
    directory outside every sandbox."""
    base = reachable_directory("customops-attacks-")
    for name, mode in (("libs", 0o755), ("tmp", 0o1777), ("home", 0o777), ("outside", 0o777)):
        (base / name).mkdir()
        (base / name).chmod(mode)
    (base / "compiled").symlink_to(compiled)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def build(place: Path, name: str, body: str, **defines: str) -> str:
    """lib<name>.so whose constructor runs `body` (in place/libs: a copy of the one built for these inputs)."""
    source = PRELUDE + f"__attribute__((constructor)) static void attack(void) {{\n{body}\n}}\n"
    source += defines.pop("EXPORT", "")
    flags = [f"-D{key}={json.dumps(value)}" for key, value in {"TOKEN": TOKEN, **defines}.items()]
    built = place / "compiled" / f"{hashlib.sha256(json.dumps([source, flags]).encode()).hexdigest()[:16]}.so"
    if not built.exists():
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(built), "-x", "c", "-", "-ldl", *flags], input=source,
                       text=True, check=True)
    out = place / "libs" / f"lib{name}.so"
    shutil.copyfile(built, out)
    out.chmod(0o755)
    return str(out)


def environment(place: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(place / "home"),
            "TMPDIR": str(place / "tmp"), "CUSTOMOPS_TEST_SECRET": SECRET, "PYTHONDONTWRITEBYTECODE": "1"}


CLI = r"""
import json, sys
from customops import cli
from customops.probe import sandbox
layers = json.loads(sys.argv[1])
if layers is not None:
    sandbox.LAYERS = frozenset(layers)
sys.argv = ["customops", *sys.argv[2:]]
cli.run()
"""


def command(mode: Mode, *argv: str) -> list[str]:
    run_as = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if mode.as_nobody else []
    return [*run_as, mode.python, *argv]


def customops(mode: Mode, *argv: str) -> list[str]:
    """The command line of `customops argv...` in `mode` (its sandbox layers included)."""
    return command(mode, "-c", CLI, json.dumps(mode.layers), *argv)


@dataclass
class Checked:
    returncode: int
    stderr: str
    results: list[dict]  # type: ignore[type-arg]
    tracer: int = 0
    peak_kb: int = 0

    @property
    def output(self) -> str:
        return "".join(r["output"] for r in self.results[:1])


def check(mode: Mode, place: Path, *libraries: str, timeout: float = 30, mapped: tuple[str, ...] = ()) -> Checked:
    """Probe `libraries` together in a checker process of their own."""
    config = {"libraries": libraries, "timeout": timeout, "layers": mode.layers, "map": mapped}
    proc = subprocess.run(command(mode, "-c", CHECKER, TOKEN, json.dumps(config)), capture_output=True, text=True,
                          env=environment(place), cwd=place, timeout=timeout + 60)
    if proc.returncode != 0:
        return Checked(proc.returncode, proc.stderr, [])
    found = json.loads(proc.stdout)
    return Checked(0, proc.stderr, found["results"], found["tracer"], found["peak_kb"])


def alive(checked: Checked) -> None:
    assert checked.returncode == 0, f"the checker died ({checked.returncode}): {checked.stderr[-2000:]}"


def processes_named(name: str) -> list[int]:
    """Live processes (not zombies waiting for the machine's init) called `name`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] == name and stat[stat.rindex(")") + 2] != "Z":
            found.append(int(pid))
    return found


def leftovers(place: Path) -> list[str]:
    return sorted(os.listdir(place / "tmp"))


# -- 1. signals -----------------------------------------------------------------------------------------


def test_kill_the_checker(mode, place):
    requires(mode, "customops out of its reach")
    library = build(place, "kill", r"""
    pid_t found[64];
    int n = targets(found, 64);
    for (int i = 0; i < n; i++) printf("KILL %d %s\n", found[i], kill(found[i], SIGKILL) ? strerror(errno) : "done");
    printf("KILL-PARENT %d %s\n", getppid(), kill(getppid(), SIGKILL) ? strerror(errno) : "done");
    printf("SEEN %d\n", n);
    fflush(stdout);
    """)
    checked = check(mode, place, library)
    alive(checked)
    (result,) = checked.results
    assert result["status"] == "loaded", result
    assert "SEEN " in result["output"]


# -- 2. ptrace ------------------------------------------------------------------------------------------


def test_ptrace_the_checker(mode, place):
    library = build(place, "ptrace", r"""
    pid_t found[65];
    int n = targets(found, 64);
    found[n++] = getppid();
    for (int i = 0; i < n; i++) {
        if (ptrace(PTRACE_SEIZE, found[i], 0, 0) == 0) {
            printf("SEIZED %d\n", found[i]);
            ptrace(PTRACE_DETACH, found[i], 0, 0);
        }
        if (ptrace(PTRACE_ATTACH, found[i], 0, 0) == 0) {
            printf("ATTACHED %d\n", found[i]);
            waitpid(found[i], 0, __WALL);
            ptrace(PTRACE_DETACH, found[i], 0, 0);
        }
        char mem[64];
        snprintf(mem, sizeof mem, "/proc/%d/mem", found[i]);
        int fd = open(mem, O_RDWR);
        if (fd >= 0) printf("MEM-OPENED %d\n", found[i]);
    }
    printf("TRIED %d\n", n);
    fflush(stdout);
    """)
    checked = check(mode, place, library)
    alive(checked)
    (result,) = checked.results
    assert result["status"] == "loaded" and "TRIED " in result["output"], result
    assert checked.tracer == 0
    for sign in ("SEIZED", "ATTACHED", "MEM-OPENED"):
        assert sign not in result["output"], result["output"]


# -- 3. secrets -----------------------------------------------------------------------------------------


def test_read_the_checkers_environment(mode, place):
    library = build(place, "environ", r"""
    if (getenv("CUSTOMOPS_TEST_SECRET")) printf("OWN-LEAK\n");
    printf("HOME=%s\n", getenv("HOME"));
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    int read_any = 0;
    while (proc && (entry = readdir(proc))) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%s/environ", entry->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t length = read(fd, cmdline, sizeof cmdline - 1);
        close(fd);
        if (length <= 0) continue;
        read_any++;
        cmdline[length] = 0;
        for (ssize_t i = 0; i < length; i++) if (!cmdline[i]) cmdline[i] = ' ';
        if (strstr(cmdline, SECRET)) printf("LEAK %s\n", entry->d_name);
    }
    printf("READ %d\n", read_any);
    fflush(stdout);
    """, SECRET=SECRET)
    checked = check(mode, place, library)
    alive(checked)
    (result,) = checked.results
    assert result["status"] == "loaded" and "READ " in result["output"], result
    assert "LEAK" not in result["output"], result["output"]
    assert f"HOME={place / 'home'}" not in result["output"]  # the loader's environment is the cleaned one


# -- 4. processes that outlive the probe -----------------------------------------------------------------


def test_a_setsid_daemon_outlives_the_probe(mode, place):
    name = "codaemon" + secrets.token_hex(3)
    library = build(place, "daemon", r"""
    pid_t child = fork();
    if (child == 0) {
        setsid();
        if (fork() == 0) {
            prctl(PR_SET_PDEATHSIG, 0);
            signal(SIGTERM, SIG_IGN);
            signal(SIGHUP, SIG_IGN);
            signal(SIGINT, SIG_IGN);
            prctl(PR_SET_NAME, NAME);
            for (;;) sleep(1);
        }
        _exit(0);
    }
    waitpid(child, 0, 0);
    usleep(100000);
    """, NAME=name)
    checked = check(mode, place, library)
    alive(checked)
    assert checked.results[0]["status"] == "loaded", checked.results
    assert processes_named(name) == []


# -- 5. customops interrupted ----------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_customops_while_a_constructor_sleeps(mode, place, signum):
    name = "cosleeps" + secrets.token_hex(3)
    library = build(place, "sleeps", 'prctl(PR_SET_NAME, NAME); sleep(120);', NAME=name)
    proc = subprocess.Popen(customops(mode, "probe", library, "--timeout", "120"),
                            env=environment(place), cwd=place, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 30
    while not processes_named(name) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert processes_named(name), "the constructor never ran"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == (130 if signum == signal.SIGINT else 128 + signum), stderr
    assert "Traceback" not in stderr
    assert processes_named(name) == []
    assert leftovers(place) == []


def test_sigkill_customops_while_a_constructor_sleeps(mode, place):
    """Nothing can clean up after SIGKILL, but every probe process dies with customops (PR_SET_PDEATHSIG)."""
    name = "coorphan" + secrets.token_hex(3)
    library = build(place, "sleeps", 'prctl(PR_SET_NAME, NAME); sleep(120);', NAME=name)
    proc = subprocess.Popen(customops(mode, "probe", library, "--timeout", "120"),
                            env=environment(place), cwd=place, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not processes_named(name) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert processes_named(name), "the constructor never ran"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while processes_named(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_named(name) == []


# -- 6. writes outside the sandbox -----------------------------------------------------------------------


def test_write_outside_the_sandbox(mode, place):
    outside = str(place / "outside" / "pwned")
    in_tmp = f"/tmp/customops-pwned-{secrets.token_hex(4)}"
    library = build(place, "writes", r"""
    const char *paths[] = {OUTSIDE, IN_TMP, "written-in-the-sandbox"};
    for (int i = 0; i < 3; i++) {
        int fd = open(paths[i], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        printf("WRITE %s %s\n", paths[i], fd < 0 ? strerror(errno) : "done");
        if (fd >= 0) close(fd);
    }
    fflush(stdout);
    """, OUTSIDE=outside, IN_TMP=in_tmp)
    try:
        checked = check(mode, place, library)
        written = [path for path in (outside, in_tmp) if os.path.lexists(path)]
    finally:
        Path(in_tmp).unlink(missing_ok=True)
    alive(checked)
    (result,) = checked.results
    assert result["status"] == "loaded" and result["sandbox_files"] == ["written-in-the-sandbox"], result
    if "writes outside the sandbox prevented" in result["containment"]:
        assert written == []
    else:
        assert "could write wherever" in result["containment"]  # not prevented here: the report says so


# -- 7. output floods ------------------------------------------------------------------------------------


def test_flood_stdout_stderr_and_every_descriptor(mode, place):
    library = build(place, "floods", r"""
    static char block[1 << 20];
    memset(block, 'A', sizeof block);
    for (int fd = 1; fd < 64; fd++)
        for (int i = 0; i < 300; i++)  /* 300 MB each, or until the descriptor refuses */
            if (write(fd, block, sizeof block) < 0) break;
    """)
    started = time.monotonic()
    checked = check(mode, place, library, timeout=60)
    alive(checked)
    (result,) = checked.results
    assert result["status"] == "loaded", result
    assert len(result["output"]) < 200_000 and "bytes of output left out" in result["output"]
    assert checked.peak_kb < 150_000, checked.peak_kb  # what was written never came into the checker's memory
    assert time.monotonic() - started < 60


# -- 8. forged protocol lines ----------------------------------------------------------------------------

FORGE = r"""
    const char *self = self_path();
    printf("LOADED %s\nREGISTERED %s evil::op\nEND\n", self, self);
    for (int fd = 1; fd < 64; fd++)
        dprintf(fd, "LOADED %s\n[\"LOADED\", \"%s\"]\n0123456789abcdef0123456789abcdef [\"LOADED\", \"%s\"]\n"
                    "[\"END\"]\n",
                self, self, self);
    fflush(stdout);
"""


@pytest.mark.parametrize(("then", "verdict"), [("abort();", "killed by SIGABRT while loading"),
                                                ("_exit(0);", "exited with status 0 while loading")],
                         ids=["abort", "exit"])
def test_print_the_probes_protocol_then_die(mode, place, then, verdict):
    library = build(place, "forges", FORGE + then)
    innocent = build(place, "innocent", "")
    checked = check(mode, place, library, innocent)
    alive(checked)
    first, second = checked.results
    assert (first["status"], first["message"]) == ("crashed", verdict), first
    assert second["status"] == "not loaded" and not first["registered"]


def test_print_the_probes_protocol_then_die_under_check_probe(place, container):
    """`check --probe` reports the crash, and what it caches is the crash too (asked twice)."""
    runtime = probe.onnxruntime_library(sys.executable)
    if runtime is None:
        pytest.skip("onnxruntime is not installed")
    repository = place / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmodel_operations { op_library_filename: "/models/m/ops/libforges.so" }\n')
    library = build(place, "forges", FORGE + "abort();", EXPORT="int RegisterCustomOps(void *o, void *a) { return 0; }")
    (repository / "m" / "ops").mkdir()
    shutil.move(library, repository / "m" / "ops" / "libforges.so")
    cache = place / "cache"
    argv = ["-m", "customops", "check", str(repository), "--container-root", str(container), "--mount",
            f"{repository}:/models", "--probe", "--probe-onnxruntime", runtime, "--format", "json",
            "--cache-dir", str(cache)]
    for _ in range(2):
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=environment(place),
                              cwd=place, timeout=120)
        assert proc.returncode == 1, proc.stderr
        report = json.loads(proc.stdout)
        (finding,) = [f for f in report["findings"] if f["code"] == "CO409"]
        assert any("crashed" in e and "SIGABRT" in e for e in finding["evidence"]), finding
        assert any(n.startswith("probes ran as ") for n in report["notes"]), report["notes"]
    entries = [json.loads(p.read_text()) for p in (cache / "probes").rglob("*") if p.is_file()]
    assert entries and all(r["status"] == "crashed" for e in entries for r in e["value"]), entries


@pytest.fixture
def container(tree: Path, place: Path) -> Path:
    root = place / "root"
    shutil.copytree(tree / "container", root, symlinks=True)
    return root


# -- 9. the sandbox removed or left ----------------------------------------------------------------------


def test_remove_the_sandbox_and_leave_it(mode, place):
    library = build(place, "unsandbox", r"""
    char here[4096], moved[4200];
    getcwd(here, sizeof here);
    close(open("junk", O_WRONLY | O_CREAT, 0600));
    mkdir("locked", 0);
    printf("UNLINK %d RMDIR %d\n", unlink("junk"), rmdir(here));
    snprintf(moved, sizeof moved, "%s.moved", here);
    printf("RENAME %d SYMLINK %d\n", rename(here, moved), symlink("/", here));
    printf("CHMOD %d CHDIR %d\n", chmod(here, 0), chdir("/"));
    fflush(stdout);
    """)
    checked = check(mode, place, library)
    alive(checked)
    assert checked.results[0]["status"] == "loaded", checked.results
    assert leftovers(place) == []


@pytest.mark.parametrize("mode_name", ["as-is", "bare"])
def test_nest_directories_deeper_than_python_recurses(mode_name, place):
    """1,200 levels: a recursive removal would raise RecursionError in the checker."""
    library = build(place, "nests", r"""
    for (int i = 0; i < 1200; i++)
        if (mkdir("d", 0700) || chdir("d")) break;
    close(open("deepest", O_WRONLY | O_CREAT, 0600));
    chmod(".", 0);
    """)
    checked = check(MODES[mode_name], place, library)
    alive(checked)
    assert checked.results[0]["status"] == "loaded" and checked.results[0]["sandbox_files"] == ["d"]
    assert leftovers(place) == []


# -- 10. files the checker has mapped --------------------------------------------------------------------


def test_truncate_a_library_the_checker_has_mapped(mode, place):
    requires(mode, "writes outside the sandbox prevented")
    library = build(place, "truncates", r"""
    const char *self = self_path();
    int fd = open(self, O_WRONLY | O_TRUNC);
    printf("OPEN %s\n", fd < 0 ? strerror(errno) : "done");
    printf("TRUNCATE %s\n", truncate(self, 0) ? strerror(errno) : "done");
    fflush(stdout);
    """)
    size = os.path.getsize(library)
    checked = check(mode, place, library, mapped=(library,))
    alive(checked)  # no SIGBUS: the file was not shrunk under the checker's map
    assert os.path.getsize(library) == size
    assert checked.results[0]["status"] == "loaded" and "TRUNCATE " in checked.output


# -- what the report says --------------------------------------------------------------------------------


def landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, int(libc.syscall(444, None, ctypes.c_size_t(0), 1)))  # landlock_create_ruleset: its ABI


def namespaces_allowed() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run([unshare, "--pid", "--fork", "--mount", "--net", "--ipc", "true"],
                                                  capture_output=True).returncode == 0


def test_the_report_says_how_far_probes_were_contained(mode, place):
    checked = check(mode, place, build(place, "plain", ""))
    alive(checked)
    containment = checked.results[0]["containment"]
    assert containment == claimed(mode.name)
    if mode.name == "other-uid":
        assert containment.startswith("probes ran as uid 65534 "), containment
    if mode.name == "non-root":
        assert containment.startswith("probes ran as your user (uid 65534) "), containment
    if "in new PID, mount, network and IPC namespaces" in containment:
        assert "writes outside the sandbox prevented; customops out of its reach; no process outlives its " \
               "probe; no network" in containment, containment
    if "under Landlock (ABI 7)" in containment:
        assert "writes outside the sandbox prevented; customops out of its reach" in containment, containment
    if mode.name != "bare" and landlock_abi() >= 6:  # what this machine allows must be used
        assert "writes outside the sandbox prevented; customops out of its reach" in containment, containment
    if mode.name in ("as-is", "other-uid") and IS_ROOT and namespaces_allowed():
        assert "in new PID, mount, network and IPC namespaces" in containment, containment
    if mode.name == "landlock-only" and "ABI 7" in containment:
        assert containment.endswith("without namespaces, under Landlock (ABI 7): writes outside the sandbox "
                                    "prevented; customops out of its reach; its processes are ended after it; "
                                    "no TCP"), containment


def test_the_report_says_what_a_library_could_do_without_containment(place):
    checked = check(MODES["bare"], place, build(place, "plain", ""))
    alive(checked)
    containment = checked.results[0]["containment"]
    assert "without namespaces, without Landlock" in containment
    assert "could write wherever" in containment and "could signal customops" in containment


def test_the_probe_command_says_how_probes_were_contained(place):
    proc = subprocess.run([sys.executable, "-m", "customops", "probe", build(place, "plain", "")],
                          capture_output=True, text=True, env=environment(place), cwd=place, timeout=60)
    assert proc.returncode == 0 and "\nnote: probes ran as " in proc.stdout, proc.stdout + proc.stderr


# -- cached probe results --------------------------------------------------------------------------------

GOOD = {"library": "", "status": "loaded", "message": "", "signal": None, "output": "", "sandbox_files": [],
        "registered": ["cached::op"], "framework_version": "", "builtin_namespaces": [], "containment": ""}


@pytest.mark.parametrize("entry", [
    {**GOOD, "status": "forged"},
    {**GOOD, "status": "LOADED"},
    {**GOOD, "signal": "9"},
    {**GOOD, "signal": True},
    {**GOOD, "registered": "cached::op"},
    {**GOOD, "registered": [1]},
    {**GOOD, "extra": 1},
    {k: v for k, v in GOOD.items() if k != "containment"},
    {**GOOD, "library": "/elsewhere/libx.so"},
    [],
    "loaded",
], ids=["status", "status-name", "signal-type", "signal-bool", "list-type", "element-type", "extra-field",
        "missing-field", "other-library", "empty", "scalar"])
def test_a_probe_cache_entry_of_another_shape_is_probed_again(tmp_path, monkeypatch, entry):
    library = str(tmp_path / "libx.so")
    Path(library).write_bytes(b"\x7fELF")
    settings = ProbeSettings(sys.executable, None, cache_dir=tmp_path / "cache")
    key = probes.cache_key(settings, "torch", sys.executable, (library,))
    assert key is not None
    fresh = (ProbeResult(library, ProbeStatus.LOADED, "", None, "", (), ("fresh::op",)),)
    monkeypatch.setattr(probes, "probe_group", lambda *args, **kwargs: fresh)
    good = {**GOOD, "library": library}
    cachedir.store_result(settings.cache_dir, "probes", key, [good])
    (hit,) = probes.cached_results(settings, "torch", None, sys.executable, (library,))
    assert hit.registered == ("cached::op",) and hit.status is ProbeStatus.LOADED
    stored = [entry if not isinstance(entry, dict) else {**entry, "library": entry.get("library") or library}]
    cachedir.store_result(settings.cache_dir, "probes", key, stored if isinstance(entry, dict) else entry)
    assert probes.cached_results(settings, "torch", None, sys.executable, (library,)) == fresh


@pytest.mark.parametrize("entry", [{"ops": "Op", "version": "1", "libraries": []},
                                   {"ops": ["Op"], "version": 1, "libraries": []},
                                   {"ops": ["Op"], "version": "1"},
                                   {"ops": ["Op"], "version": "1", "libraries": [], "more": []},
                                   ["Op"]],
                         ids=["ops-type", "version-type", "missing-field", "extra-field", "list"])
def test_a_tensorflow_registry_cache_entry_of_another_shape_is_probed_again(tmp_path, monkeypatch, entry):
    identity = tmp_path / "tensorflow" / "__init__.py"
    identity.parent.mkdir()
    identity.write_text("")
    monkeypatch.setattr(probes, "package_file", lambda python, name: str(identity))
    monkeypatch.setattr(probes, "tensorflow_ops", lambda *args: (frozenset({"Fresh"}), "9.9"))
    settings = ProbeSettings(sys.executable, None, cache_dir=tmp_path / "cache")
    key = probes.cache_key(settings, "tensorflow-ops", str(identity), ())
    assert key is not None
    cachedir.store_result(settings.cache_dir, "probes", key, {"ops": ["Cached"], "version": "1.0", "libraries": []})
    registry = probes.tensorflow_registry(LoadPlan((), (), (), ()), settings)
    assert not isinstance(registry, str) and registry.version == "1.0"
    cachedir.store_result(settings.cache_dir, "probes", key, entry)
    registry = probes.tensorflow_registry(LoadPlan((), (), (), ()), settings)
    assert not isinstance(registry, str) and registry.version == "9.9"


def test_an_interpreter_that_cannot_run_the_sandbox_is_not_blamed_on_the_library(place):
    (result,) = probe.probe_group((build(place, "plain", ""),), python="/bin/false")
    assert result.status is ProbeStatus.UNAVAILABLE and "ended before loading anything (status 1)" in result.message
