"""The probe's own processes: `python -I -c <this file's text> <config>`, run by the probe interpreter.

customops never imports this module: customops/probe/sandbox.py hands its text to the interpreter that probes
(which may be another Python, a container's), so it needs nothing but the standard library and ctypes and
runs on Python 3.8 and later.

    customops ── supervisor ── init (PID 1 of the new namespaces) ── loader ── what the library starts

The supervisor enters new PID, mount, IPC and network namespaces (and a user namespace when customops is
not root) where the machine allows it. Their init mounts a read-only view of the file system with a fresh
/proc and a small tmpfs as the sandbox, then forks the loader, the only process that runs untrusted code;
when init exits, the kernel kills everything left in the namespace. Without a PID namespace the supervisor
is the loader's parent and a subreaper, and kills every process left when the loader ends.

The loader gives up what it can before it runs its script: uid 65534 when customops is root (if that uid
can read what the probe needs), no capabilities, no new privileges, Landlock (writes only in the sandbox,
no TCP, no signals or ptrace outside its own processes), resource limits, death with its parent.

Three channels: the loader's stdout and stderr go to a file (customops reads a bounded part of it); its
results go over a pipe, each line prefixed by a nonce that came over another pipe, never argv or the
environment (a library printing the protocol cannot forge a line); what only the processes above the
loader know (its exit status, the files in the sandbox) and the containment achieved (reported by the
loader before it runs anything untrusted) go over a status pipe the loader closes before its script.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
import traceback
from contextlib import suppress
from typing import Any

NOBODY = 65534
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
NAMESPACES = ((CLONE_NEWUSER, "user"), (CLONE_NEWPID, "PID"), (CLONE_NEWNS, "mount"), (CLONE_NEWNET, "network"),
              (CLONE_NEWIPC, "IPC"))
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 4, 24, 28
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 36, 38, 47, 4
# NOROOT, NO_SETUID_FIXUP unset, KEEP_CAPS unset, NO_CAP_AMBIENT_RAISE: each locked
SECUREBITS = 0x01 | 0x02 | 0x08 | 0x20 | 0x40 | 0x80
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
# System call numbers shared by every Linux architecture since 5.x (numbers from 424 on are unified).
SYS_MOUNT_SETATTR, SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 442, 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
# Landlock file-system rights that change something: write, remove, make, link/rename across, truncate.
LL_WRITE_FILE, LL_TRUNCATE = 1 << 1, 1 << 14
LL_CHANGES = LL_WRITE_FILE | sum(1 << bit for bit in range(4, 13))  # REMOVE_DIR .. MAKE_SYM
LL_REFER = 1 << 13
LL_TCP = (1 << 0) | (1 << 1)  # BIND_TCP, CONNECT_TCP
LL_SCOPES = (1 << 0) | (1 << 1)  # abstract unix sockets, signals

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def checked(result: int) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def prctl(option: int, arg: int = 0, arg3: int = 0) -> int:
    ulong = ctypes.c_ulong
    return checked(libc.prctl(option, ulong(arg), ulong(arg3), ulong(0), ulong(0)))


def attempt(function, *args) -> bool:
    """Whether a privilege-shedding step worked: where the machine refuses it, the report says so."""
    try:
        function(*args)
        return True
    except OSError:
        return False


def report(fd: int, tag: str, value: object) -> None:
    """Best effort: customops may have stopped listening (a timeout), and what follows must still run."""
    with suppress(OSError):
        write_all(fd, (tag + " " + json.dumps(value) + "\n").encode())


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def main() -> None:
    config = json.loads(sys.argv[1])
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != config["parent"]:
        os._exit(1)  # customops ended before we could follow it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a library's kill(1, SIGINT) must not end init
    facts: dict[str, Any] = {"root": os.geteuid() == 0, "namespaces": []}
    try:
        if "namespaces" in config["layers"]:
            facts["namespaces"] = enter_namespaces()  # first: a non-dumpable process cannot write its uid_map
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # again: a change of credentials may have cleared it
            if os.getppid() != config["parent"]:
                os._exit(1)
        prctl(PR_SET_DUMPABLE, 0)  # what the loader runs cannot ptrace us or read our /proc files
        if "PID" not in facts["namespaces"]:
            prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the loader become ours, to be ended
            supervise(config, facts)
        init = os.fork()
        if init == 0:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            supervise(config, facts)
    except Exception as exc:
        report(config["status_fd"], "ERROR", "".join(traceback.format_exception_only(type(exc), exc)).strip())
        os._exit(70)
    for fd in (config["status_fd"], config["result_fd"], config["nonce_fd"]):
        os.close(fd)
    # customops stops a probe with SIGTERM: init's death kills every process in its namespace, and the
    # wait below returns only once they are all gone.
    signal.signal(signal.SIGTERM, lambda *_: kill(init))
    _, status = os.waitpid(init, 0)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)


def enter_namespaces() -> list[str]:
    """Unshare what this machine allows, strongest first; the names of the namespaces entered."""
    uid, gid = os.geteuid(), os.getegid()
    base = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC
    wanted = [base | CLONE_NEWNET, base]
    if uid != 0:
        wanted = [flags | CLONE_NEWUSER for flags in wanted]
    else:  # root without CAP_SYS_ADMIN may still have user namespaces
        wanted += [flags | CLONE_NEWUSER for flags in wanted]
    for flags in wanted:
        if libc.unshare(flags) != 0:
            continue
        if flags & CLONE_NEWUSER:  # map ourselves to ourselves: files keep their owners
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                               ("gid_map", f"{gid} {gid} 1")):
                with open("/proc/self/" + name, "w") as f:
                    f.write(text)
        return [name for flag, name in NAMESPACES if flags & flag]
    return []


def supervise(config: dict[str, Any], facts: dict[str, Any]) -> None:
    """Run the loader, report how it ended and what it left in the sandbox, and end what it started."""
    sandbox = config["sandbox"]
    uid, gid = loader_ids(config, facts)
    facts["uid"], facts["other_uid"] = uid, uid != os.geteuid()
    if facts["other_uid"]:
        os.chown(sandbox, uid, gid)  # the sandbox where there is no tmpfs over it
    if "mount" in facts["namespaces"]:
        facts.update(mount_view(sandbox, uid, gid, config["sandbox_limit"]))
    me = os.getpid()
    loader = os.fork()
    if loader == 0:
        try:
            load(config, facts, uid, gid, me)
        except BaseException as exc:  # before the script: our failure, not the library's
            report(config["status_fd"], "ERROR", "".join(traceback.format_exception_only(type(exc), exc)).strip())
        os._exit(70)
    os.close(config["result_fd"])
    os.close(config["nonce_fd"])
    signal.signal(signal.SIGTERM, lambda *_: kill(loader))
    while True:  # as init, this also reaps whatever the loader's processes leave
        pid, status = os.waitpid(-1, 0)
        if pid == loader:
            break
    report(config["status_fd"], "EXIT", status)
    report(config["status_fd"], "FILES", sandbox_files(sandbox))
    if "PID" not in facts["namespaces"]:
        end_children(me)
    os._exit(0)


def loader_ids(config: dict[str, Any], facts: dict[str, Any]) -> tuple[int, int]:
    """uid 65534 for the loader when we are root (in the machine's user namespace) and that uid can reach
    the interpreter, its packages, the libraries and the sandbox; else our own ids."""
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0 or "user" in facts["namespaces"] or "other-uid" not in config["layers"]:
        return uid, gid
    needed = [(sys.executable, os.X_OK), (os.path.dirname(config["sandbox"]), os.X_OK)]
    needed += [(path, os.R_OK) for path in config["readable"]]
    needed += [(path, os.R_OK | os.X_OK) for path in sys.path if os.path.isdir(path)]
    checker = os.fork()  # asked as that uid in a child: a change of our own ids would clear our PDEATHSIG
    if checker == 0:
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            os._exit(0 if all(os.access(path, mode) for path, mode in needed) else 1)
        except BaseException:  # root without CAP_SETUID or CAP_SETGID: not possible
            os._exit(1)
    _, status = os.waitpid(checker, 0)
    return (NOBODY, NOBODY) if status == 0 else (uid, gid)


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def mount(source: str, target: str, kind: str | None, flags: int, options: str | None = None) -> None:
    checked(libc.mount(source.encode(), os.fsencode(target), kind and kind.encode(), ctypes.c_ulong(flags),
                       options and options.encode()))


def mount_view(sandbox: str, uid: int, gid: int, limit: int) -> dict[str, bool]:
    """In our own mount namespace: everything read-only, /proc of the new PID namespace (the processes of
    the machine disappear), and the sandbox a small tmpfs of the loader's that vanishes with the namespace."""
    facts = {"read_only": False, "proc": False}
    if not attempt(mount, "none", "/", None, MS_REC | MS_PRIVATE):  # nothing we mount reaches the machine
        return facts
    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    facts["read_only"] = libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr),
                                      ctypes.sizeof(attr)) == 0
    facts["proc"] = attempt(mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # Without the tmpfs the sandbox is the directory below it (read-only, then: the library writes nothing).
    attempt(mount, "customops-probe", sandbox, "tmpfs", MS_NOSUID | MS_NODEV,
            f"size={limit},nr_inodes=4096,mode=0700,uid={uid},gid={gid}")
    return facts


def load(config: dict[str, Any], facts: dict[str, Any], uid: int, gid: int, parent: int) -> None:
    """The loader: shed every privilege, report the containment, then run the script."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    memory = config["memory_mb"] * 1024 * 1024
    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, config["file_limit"]),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # output past the limit fails instead of killing the probe
    facts["capabilities"] = not drop_privileges(uid, gid)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
    if os.getppid() != parent:
        os._exit(70)
    if attempt(prctl, PR_SET_NO_NEW_PRIVS, 1) and "landlock" in config["layers"]:  # Landlock needs it
        facts.update(landlock(config["sandbox"]))
    os.chdir(config["sandbox"])
    nonce = b""
    while True:
        chunk = os.read(config["nonce_fd"], 64)
        if not chunk:
            break
        nonce += chunk
    os.close(config["nonce_fd"])
    report(config["status_fd"], "CONTAINMENT", facts)
    os.close(config["status_fd"])
    run_script(config["script"], config["args"], config["result_fd"], nonce)


def drop_privileges(uid: int, gid: int) -> bool:
    """Switch to uid/gid and give up every capability, for good (nothing gains them back by exec);
    whether none is left."""
    last = 63
    with suppress(OSError, ValueError), open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        attempt(prctl, PR_CAPBSET_DROP, cap)
    attempt(prctl, PR_SET_SECUREBITS, SECUREBITS)
    if uid != os.geteuid():
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    attempt(prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    libc.capset(header, (ctypes.c_uint32 * 6)())
    with open("/proc/self/status") as f:
        held = [line.split()[1] for line in f if line.startswith(("CapPrm:", "CapEff:", "CapInh:", "CapAmb:"))]
    return all(int(mask, 16) == 0 for mask in held)


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock(sandbox: str) -> dict[str, object]:
    """Restrict this process and everything it starts: changes to the file system only under the sandbox
    (and writes to /dev/null), no TCP, no signals to processes outside (ABI 6), no ptrace of them."""
    abi = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return {}
    changes = LL_CHANGES | (LL_REFER if abi >= 2 else 0) | (LL_TRUNCATE if abi >= 3 else 0)
    ruleset = (ctypes.c_uint64 * 3)(changes, LL_TCP if abi >= 4 else 0, LL_SCOPES if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(ruleset), ctypes.c_size_t(size), 0)
    if fd < 0:
        return {}
    try:
        for path, rights in ((sandbox, changes), (os.devnull, changes & (LL_WRITE_FILE | LL_TRUNCATE))):
            beneath = PathBeneath(rights, os.open(path, os.O_PATH | os.O_CLOEXEC))
            try:
                checked(libc.syscall(SYS_LANDLOCK_ADD_RULE, fd, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(beneath), 0))
            finally:
                os.close(beneath.parent_fd)
        checked(libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0))
    except OSError:
        return {}
    finally:
        os.close(fd)
    return {"landlock": abi, "landlock_tcp": abi >= 4, "landlock_signals": abi >= 6}


def run_script(script: str, args: list[str], fd: int, nonce: bytes) -> None:
    """Run the probe script's main(emit, args) (customops/probe/child_*.py), where `emit` sends one result
    over the private channel; "END" when it returns 0. The process then ends at once, with main's status: no
    library destructor or atexit handler runs after the report."""

    def emit(*fields: str) -> None:  # a newline first: an unfinished line a library wrote cannot swallow it
        write_all(fd, b"\n" + nonce + b" " + json.dumps(fields).encode() + b"\n")

    sys.argv = ["-c", *args]
    code = 0
    try:
        namespace: dict[str, Any] = {"__name__": "__probe__"}
        exec(compile(script, "<probe>", "exec"), namespace)
        code = namespace["main"](emit, args)
        if code == 0:
            emit("END")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except BaseException:  # the traceback goes to the probe's output
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def sandbox_files(sandbox: str) -> list[str]:
    """What is in the sandbox (the first 1000 names), as printable text."""
    try:
        fd = os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # not where a symlink points
    except OSError:
        return []
    try:
        names = sorted(os.listdir(fd))[:1000]
    except OSError:
        return []
    finally:
        os.close(fd)
    return [os.fsencode(name).decode("utf-8", "backslashreplace") for name in names]


def end_children(me: int) -> None:
    """Kill our children until there are none: the loader's orphans come to us (a subreaper), and the
    children of each one we kill come next."""
    while True:
        for pid in children(me):
            kill(pid)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def kill(pid: int) -> None:
    with suppress(OSError):  # already gone
        os.kill(pid, signal.SIGKILL)


def children(parent: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent:
            found.append(int(name))
    return found


if __name__ == "__main__":
    main()
