"""Hostile names and values against every output, row by row (as tests/test_bad_input.py): a directory
name, manifest value or argument written to inject into a report format, a terminal or a shell, run
through the real CLI. Each row asserts the exit status, a substring of the output, no traceback and no
internal error; then the output is checked for its format (valid UTF-8 and JSON, well-formed XML, one
GitHub command per line, no escape sequence from the input, `eval` runs no command of the input)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from elf_tools import gcc_shared

from customops.errors import printable

Args = list[str | bytes]
Row = tuple[str, Callable[[Path, Path], Args], int, str]

# Directory names (bytes: some are not UTF-8). None holds "/" or NUL, which no file name can.
NAMES: dict[str, bytes] = {
    "newline-command": b"a\n::notice file=x::All checks passed",
    "carriage-return": b"ok\r::error::forged",
    "ansi-clear": b"\x1b[2J\x1b[Hclear",
    "osc8-hyperlink": b"\x1b]8;;http:evil\x1b\\click\x1b]8;;\x1b\\",
    "osc52-clipboard": b"\x1b]52;c;cHduZWQ=\x07clip",
    "rich-markup": b"[bold red]x[link=http:evil]y[blink]",
    "every-c0-control": b"c" + bytes(range(1, 32)).replace(b"/", b"") + b"\x7f",
    "not-utf8": b"bad\xff\xfe",
    "xml-breakers": b"x]]><&\"'",
    "property-breakers": b"a:b,c::d",
    "percent-escapes": b"%0A%3A%25",
    "bidi-override": "\u202eevil\u202c".encode(),
    "emoji-code": b":smile:x",
}
FORMATS = ("text", "json", "sarif", "junit", "github", "gitlab")
FORMAT_MARK = {"text": "FAIL", "json": '"ok": false', "sarif": '"version": "2.1.0"', "junit": "<testsuite",
               "github": "::error ", "gitlab": '"check_name"'}
CONFIG = 'backend: "onnxruntime"\nmodel_operations { op_library_filename: "libx.so" }\n'
# Names with a shell payload: each would create PWNED in the working directory if it ever ran.
SHELL_NAMES: dict[str, bytes] = {
    "command-substitution": b"$(touch${IFS}PWNED)",
    "backticks": b"`touch${IFS}PWNED`",
    "quotes": b"'\"';touch${IFS}PWNED;'\"",
    "not-utf8": b"r\xff$(touch${IFS}PWNED)",
}
RECORDING_SERVER = "#!/bin/sh\nprintf '%s\\0' \"$LD_PRELOAD\" \"$@\" > \"$RECORD\"\n"


def customops(args: Args, cwd: Path, cache: Path, stdout: int | None = subprocess.PIPE,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    environment = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cache), "RECORD": str(cwd / "record"), **(env or {})}
    environment.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-m", "customops", *args], stdout=stdout, stderr=subprocess.PIPE,
                          cwd=cwd, env=environment, timeout=300)


def under(t: Path, *parts: bytes) -> bytes:
    return os.path.join(os.fsencode(t), *parts)


def write(path: bytes, data: str) -> bytes:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(data)
    return path


def hostile_repo(t: Path, name: bytes) -> bytes:
    """A repository of one model named `name` whose config makes findings about it in every format."""
    repo = under(t, b"models")
    os.makedirs(os.path.join(repo, name, b"1"))
    write(os.path.join(repo, name, b"config.pbtxt"), CONFIG)
    return repo


def check(t: Path, tree: Path, name: bytes, fmt: str) -> Args:
    return ["check", hostile_repo(t, name), "--container-root", str(tree / "container"), "--format", fmt,
            "--no-cache"]


def launchable(t: Path, tree: Path, parent: bytes = b"r", manifest: str | None = None) -> bytes:
    """A repository under t/`parent` whose check passes (a custom backend in the model directory) and
    whose manifest preloads a PyTorch op library (or says `manifest`)."""
    repo = under(t, parent, b"models")
    os.makedirs(os.path.join(repo, b"m", b"1"))
    os.makedirs(os.path.join(repo, b"m", b"ops"))
    write(os.path.join(repo, b"m", b"config.pbtxt"), 'backend: "standalone"\n')
    shutil.copy2(tree / "example/libtriton_standalone.so", os.path.join(repo, b"m", b"libtriton_standalone.so"))
    shutil.copy2(tree / "example/libtorch_op.so", os.path.join(repo, b"m", b"ops", b"libtorch_op.so"))
    write(os.path.join(repo, b"customops.toml"), manifest or '[pytorch]\nops = ["m/ops/libtorch_op.so"]\n')
    return repo


def server_args(tree: Path, repo: bytes, server: str | bytes = "tritonserver") -> Args:
    return ["--", server, b"--model-repository=" + repo, "--backend-directory",
            str(tree / "container/opt/tritonserver/backends")]


def env(t: Path, tree: Path, parent: bytes, manifest: str | None = None) -> Args:
    return ["env", *server_args(tree, launchable(t, tree, parent, manifest))]


def dry_run(t: Path, tree: Path, parent: bytes) -> Args:
    return ["launch", "--dry-run", "--no-check", "--no-cache",
            *server_args(tree, launchable(t, tree, parent), recording_server(t))]


def recording_server(t: Path) -> str:
    server = t / "server.sh"
    server.write_text(RECORDING_SERVER)
    server.chmod(0o755)
    return str(server)


def launch(t: Path, tree: Path, server: str | bytes, *options: str) -> Args:
    return ["launch", "--no-cache", *options, *server_args(tree, launchable(t, tree), server)]


def not_executable(t: Path) -> str:
    (t / "server").write_text("#!/bin/sh\n")
    (t / "server").chmod(0o644)
    return str(t / "server")


def manifest_check(t: Path, tree: Path, manifest: str) -> Args:
    repo = hostile_repo(t, b"m")
    write(os.path.join(repo, b"customops.toml"), manifest)
    return ["check", repo, "--container-root", str(tree / "container"), "--no-cache"]


def copied_library(t: Path, tree: Path, name: bytes) -> bytes:
    """A library named `name`.so in the working directory, named relatively (short enough for a title)."""
    shutil.copy2(tree / "e/libvuser.so", under(t, name + b".so"))
    return name + b".so"


def needing_a_hostile_name(t: Path) -> str:
    """A library whose DT_NEEDED entry, found beside it through RUNPATH $ORIGIN, holds an escape sequence and
    markup: resolve prints it in the load tree."""
    hostile = "lib\x1b[2J[red]dep.so"
    gcc_shared(t / hostile, "int dep(void) { return 1; }", f"-Wl,-soname,{hostile}")
    gcc_shared(t / "libtop.so", "int dep(void); int top(void) { return dep(); }", str(t / hostile),
               "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags")
    return "./libtop.so"


def needing_itself(t: Path) -> str:
    """A shared library without a SONAME that needs itself (found through RUNPATH $ORIGIN), started as the
    program: the program is not known by that name, so a second object of the same name is loaded."""
    gcc_shared(t / "build/libself.so", "int self_fn(void) { return 1; }\n")
    gcc_shared(t / "libself.so", "int self_fn(void) { return 1; }\n", "-Wl,--no-as-needed", f"-L{t / 'build'}",
               "-lself", "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags")
    return str(t / "libself.so")


def deep_profile(t: Path) -> str:
    (t / "profile.json").write_text("[" * 100_000 + "]" * 100_000)
    return str(t / "profile.json")


ROWS: list[Row] = [
    # every report format x every hostile model name
    *[(f"{fmt} {key}", (lambda t, tr, n=name, f=fmt: check(t, tr, n, f)), 1, FORMAT_MARK[fmt])
      for key, name in NAMES.items() for fmt in FORMATS],
    # export lines and dry-run command lines, evaluated by bash (see test_hostile_input)
    *[(f"env {key}", (lambda t, tr, n=name: env(t, tr, n)), 0, "export LD_PRELOAD=") for key, name in
      SHELL_NAMES.items()],
    *[(f"dry-run {key}", (lambda t, tr, n=name: dry_run(t, tr, n)), 0, "LD_PRELOAD=") for key, name in
      SHELL_NAMES.items()],
    ("env plugin comment under a newline", lambda t, tr: env(t, tr, b"\ntouch PWNED\n#", '[tensorrt]\nplugins = '
                                                         '["m/ops/libtorch_op.so"]\n'), 0, "# and give tritonserver"),
    ("env plugin comment under a command", lambda t, tr: env(t, tr, b"$(touch PWNED)", '[tensorrt]\nplugins = '
                                                          '["m/ops/libtorch_op.so"]\n'), 0, "# and give tritonserver"),
    ("env preload under a newline", lambda t, tr: env(t, tr, b"\ntouch PWNED\n"), 2, "CO307"),
    ("env preload under an escape sequence", lambda t, tr: env(t, tr, b"\x1b]52;c;eA==\x07"), 2, "\\x1b]52"),
    ("env manifest path with a newline", lambda t, tr: env(t, tr, b"r", '[pytorch]\nops = ["m/\\ntouch PWNED"]\n'),
     2, "CO106"),
    # manifests
    ("manifest preload with a newline", lambda t, tr: manifest_check(t, tr, '[host]\npreload = ["a\\nb.so"]\n'), 2,
     "contains a control character"),
    ("manifest preload with an escape sequence", lambda t, tr: manifest_check(t, tr, '[host]\npreload = '
                                                                               '["\\u001b[2J.so"]\n'), 2,
     "'\\x1b[2J.so' contains a control character"),
    ("manifest plugin with a C1 control", lambda t, tr: manifest_check(t, tr, '[tensorrt]\nplugins = ["a\\u009bb"]\n'),
     2, "control character"),
    ("manifest profile with a newline", lambda t, tr: manifest_check(t, tr, '[check]\nprofile = "p\\n.json"\n'), 2,
     "[check] profile"),
    ("manifest ignore glob with a control", lambda t, tr: manifest_check(
        t, tr, '[check]\nignore = [{ code = "CO104", library = "\\u0007*" }]\n'), 2, "control character"),
    ("manifest ignore glob of the wrong type", lambda t, tr: manifest_check(
        t, tr, '[check]\nignore = [{ code = "CO104", symbol = 7 }]\n'), 2, "are strings"),
    ("manifest arrays nested 100000 deep", lambda t, tr: manifest_check(
        t, tr, "[pytorch]\nops = " + "[" * 100_000 + "]" * 100_000 + "\n"), 2, "CO106"),
    ("manifest tables nested 100000 deep", lambda t, tr: manifest_check(
        t, tr, "[pytorch]\nops = " + "{a=" * 100_000 + "1" + "}" * 100_000 + "\n"), 2, "CO106"),
    ("manifest unknown section with an escape", lambda t, tr: manifest_check(t, tr, '["\\u001b[2J"]\n'), 2,
     "unknown section [\\x1b[2J]"),
    ("profile JSON nested 100000 deep", lambda t, tr: ["check", hostile_repo(t, b"m"), "--profile", deep_profile(t)],
     2, "profile.json"),
    # --output
    ("json into a missing directory", lambda t, tr: [*check(t, tr, b"m", "json"), "--output", str(t / "no/r.json")],
     2, "no/r.json: No such file or directory"),
    ("text into a missing directory", lambda t, tr: [*check(t, tr, b"m", "text"), "--output", str(t / "no/r.txt")],
     2, "no/r.txt: No such file or directory"),
    ("json onto a full disk", lambda t, tr: [*check(t, tr, b"m", "json"), "--output", "/dev/full"], 2,
     "/dev/full: No space left on device"),
    ("text onto a full disk", lambda t, tr: [*check(t, tr, b"m", "text"), "--output", "/dev/full"], 2,
     "/dev/full: No space left on device"),
    ("junit into a directory", lambda t, tr: [*check(t, tr, b"m", "junit"), "--output", str(t)], 2,
     "Is a directory"),
    ("output named with an escape sequence", lambda t, tr: [*check(t, tr, b"m", "sarif"), "--output",
                                                            under(t, b"no\x1b[2J", b"r.sarif")], 2,
     "no\\x1b[2J/r.sarif: No such file or directory"),
    ("output named with bytes that are not UTF-8", lambda t, tr: [*check(t, tr, b"m", "github"), "--output",
                                                                  under(t, b"no\xff", b"r")], 2, "no\\xff/r: No such"),
    ("output into a hostile name", lambda t, tr: [*check(t, tr, b"m", "json"), "--output",
                                                  under(t, b"r\n\x1b[2J.json")], 1, ""),
    # launch: the shell's statuses and words when the server cannot be started
    ("launch a server not in PATH", lambda t, tr: launch(t, tr, "no-such-tritonserver"), 127,
     "customops: no-such-tritonserver: not found"),
    ("launch --no-check a server not in PATH", lambda t, tr: launch(t, tr, "no-such-tritonserver", "--no-check"), 127,
     "customops: no-such-tritonserver: not found"),
    ("launch a missing server path", lambda t, tr: launch(t, tr, str(t / "nope")), 127, "nope: No such file"),
    ("launch --no-check a missing server path", lambda t, tr: launch(t, tr, str(t / "nope"), "--no-check"), 127,
     "nope: No such file"),
    ("launch a server that is not executable", lambda t, tr: launch(t, tr, not_executable(t)), 126,
     "server: Permission denied"),
    ("launch --no-check a server that is not executable", lambda t, tr: launch(t, tr, not_executable(t),
                                                                               "--no-check"), 126,
     "server: Permission denied"),
    ("launch a directory", lambda t, tr: launch(t, tr, str(t), "--no-check"), 126, "Permission denied"),
    ("launch a server named with an escape sequence", lambda t, tr: launch(t, tr, b"\x1b[2Jtritonserver",
                                                                           "--no-check"), 127,
     "customops: \\x1b[2Jtritonserver: not found"),
    ("launch a server named with bytes that are not UTF-8", lambda t, tr: launch(t, tr, b"triton\xffserver",
                                                                                 "--no-check"), 127,
     "triton\\xffserver: not found"),
    ("launch blocked by a model named with escape sequences", lambda t, tr: launch(
        t, tr, recording_server(t)) if hostile_repo(t / "r", NAMES["osc52-clipboard"] + NAMES["ansi-clear"]) else [],
     1, "not starting the server"),
    ("launch with a repository that is not UTF-8", lambda t, tr: ["launch", "--no-cache", *server_args(
        tr, launchable(t, tr, b"r\xff"), recording_server(t))], 0, ""),
    # arguments
    ("repository argument with an escape sequence", lambda t, tr: ["check", under(t, b"\x1b[2J\n")], 2,
     "\\x1b[2J\\n: model repository does not exist"),
    ("repository argument not UTF-8", lambda t, tr: ["check", under(t, b"\xff")], 2, "\\xff: model repository"),
    ("repository argument not UTF-8 that exists", lambda t, tr: check(t / "\udcff", tr, b"m", "json"), 1,
     '"ok": false'),
    ("--format not UTF-8", lambda t, tr: ["check", str(t), "--format", b"\xff\x1b[2J"], 2, "invalid choice"),
    ("unknown option with an escape sequence", lambda t, tr: ["check", b"--\x1b]52;c;eA==\x07"], 2,
     "unrecognized arguments: --\\x1b]52"),
    ("--mount with an escape sequence", lambda t, tr: [*check(t, tr, b"m", "json"), "--mount", b"\x1b[2J"], 2,
     "--mount \\x1b[2J"),
    ("explain an escape sequence", lambda t, tr: ["explain", b"\x1b[2J"], 2, "unknown code"),
    ("scan a library named with an escape sequence", lambda t, tr: ["scan", copied_library(t, tr, b"\x1b[2J[bold]x")],
     0, "\\x1b[2J[bold]x.so"),
    ("scan a library named with markup", lambda t, tr: ["scan", copied_library(t, tr, b"[link=http:evil]x")], 0,
     "[link=http:evil]x.so"),
    ("scan json of a library not UTF-8", lambda t, tr: ["scan", "--format", "json", copied_library(t, tr, b"\xff")],
     0, '"schema"'),
    ("resolve json of a library not UTF-8", lambda t, tr: [
        "resolve", "--format", "json", "--dlopen", b"./" + copied_library(t, tr, b"\xff")], 1, '"schema"'),
    ("resolve a library named with an escape sequence", lambda t, tr: [
        "resolve", "--dlopen", b"./" + copied_library(t, tr, b"\x1b]8;;http:e\x1b\\x[red]")], 1,
     "\\x1b]8;;http:e\\x1b\\x[red].so"),
    ("resolve's load tree of a DT_NEEDED named with an escape sequence", lambda t, tr: [
        "resolve", "--dlopen", needing_a_hostile_name(t)], 0, "lib\\x1b[2J[red]dep.so => "),
    ("resolve's load tree of a program loaded twice under one name", lambda t, tr: [
        "resolve", "--host", needing_itself(t)], 0, "libself.so => "),
]


@pytest.mark.parametrize(("name", "setup", "status", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_hostile_input(name, setup, status, expected, tree, tmp_path):
    args = setup(tmp_path, tree)
    result = customops(args, tmp_path, tmp_path / "cache")
    shell = args[0] == "env" or "--dry-run" in args  # for a shell, paths are printed byte for byte
    out = result.stdout.decode("utf-8", "surrogateescape" if shell else "strict")  # else valid UTF-8 for any input
    err = result.stderr.decode("utf-8")
    assert "Traceback" not in err and "internal error" not in err, err
    assert result.returncode == status, (out[-1500:], err)
    assert "\x1b" not in err and "\r" not in err, err
    if status >= 2:  # one line; launch's notes come before it, argparse's usage line too (after an unrecognized
        lines = [line for line in err.splitlines() if not line.startswith("customops: note: ")]  # argument's error)
        if "error: unrecognized arguments: " in lines[0]:
            lines = lines[:1]
        assert lines[-1].startswith("customops"), err
        assert len(lines) == 1 or lines[0].startswith("usage:"), err
    assert expected in out + err
    command, fmt = args[0], args[args.index("--format") + 1] if "--format" in args else "text"
    if status < 2 and command in ("check", "scan", "resolve") and "--output" not in args:
        valid_report(str(fmt), result.stdout)
    if status == 0 and shell:
        eval_safely(tmp_path, out)
    elif status == 0 and command == "launch":
        assert_exact_preload((tmp_path / "record").read_bytes().split(b"\0")[0])


def valid_report(fmt: str, out: bytes) -> None:
    """What each format promises for any input: UTF-8, parseable, no escape sequence that was not ours."""
    text = out.decode("utf-8")
    if fmt == "text":
        assert "\x1b" not in text
    elif fmt in ("json", "sarif", "gitlab"):
        json.dumps(json.loads(text), ensure_ascii=False).encode("utf-8")  # no lone surrogate, even escaped
    elif fmt == "junit":
        ET.fromstring(out)
    elif fmt == "github":
        github_commands(text)


def github_commands(text: str) -> list[tuple[str, dict[str, str], str]]:
    """Every line one workflow command, parsed as the runner does: the command up to the first `::`, its
    properties split at `,` and `=`, then unescaped."""
    commands = []
    for line in text.splitlines():
        assert line.startswith("::") and "\r" not in line and "\x1b" not in line, line
        head, separator, message = line[2:].partition("::")
        assert separator, line
        command, _, props = head.partition(" ")
        assert command in ("error", "warning", "notice"), line
        properties = dict(p.split("=", 1) for p in props.split(","))
        assert set(properties) <= {"file", "line", "col", "title"}, line
        commands.append((command, {k: unescape(v) for k, v in properties.items()}, unescape(message)))
    return commands


def unescape(value: str) -> str:
    return (value.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")
            .replace("%25", "%"))


def eval_safely(t: Path, out: str) -> None:
    """bash evaluates what customops printed: no command of a name runs, the values are the intended ones."""
    printed = t / "printed"
    printed.write_bytes(out.encode("utf-8", "surrogateescape"))
    script = 'eval "$(cat "$1")"; printf "%s" "${LD_PRELOAD-}" > preload'
    shell = subprocess.run(["bash", "-c", script, "bash", str(printed)], cwd=t, capture_output=True,
                           env={**os.environ, "RECORD": str(t / "record")}, timeout=60)
    assert shell.returncode == 0, shell.stderr
    assert not list(t.rglob("PWNED")), "a command in a name ran"
    if out.startswith("env "):  # launch --dry-run: the command ran the recording server
        assert_exact_preload((t / "record").read_bytes().split(b"\0")[0])
    elif "export LD_PRELOAD=" in out:
        assert_exact_preload((t / "preload").read_bytes())


def assert_exact_preload(value: bytes) -> None:
    """LD_PRELOAD is the op library's path byte for byte, hostile directory names and all."""
    assert value.endswith(b"/models/m/ops/libtorch_op.so") and os.path.isfile(value), value


def test_the_table_has_at_least_fifty_rows():
    assert len(ROWS) >= 50


def test_every_name_reaches_every_format_as_documented(tree, tmp_path):
    """Beyond validity: each format shows the name in its documented form (JSON: `\\xNN` for a byte that is
    not UTF-8; SARIF: the percent-encoded bytes; JUnit, GitHub and text: printable)."""
    repo = under(tmp_path, b"models")
    for name in NAMES.values():
        os.makedirs(os.path.join(repo, name, b"1"))
        write(os.path.join(repo, name, b"config.pbtxt"), CONFIG)
    base = ["check", repo, "--container-root", str(tree / "container"), "--no-cache", "--format"]
    out = {fmt: customops([*base, fmt], tmp_path, tmp_path / "cache").stdout for fmt in FORMATS}
    for fmt in FORMATS:
        valid_report(fmt, out[fmt])
    json_names = {m["name"] for m in json.loads(out["json"])["models"]}
    assert json_names == {name.decode("utf-8", "backslashreplace") for name in NAMES.values()}
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in json.loads(out["sarif"])["runs"][0]["results"] if "locations" in r}
    assert {quote(name + b"/config.pbtxt") for name in NAMES.values()} <= uris
    shown = {printable(os.fsdecode(name)) for name in NAMES.values()}
    assert {case.get("name") for case in ET.fromstring(out["junit"])} == shown
    files = {props["file"] for _c, props, _m in github_commands(out["github"].decode()) if "file" in props}
    assert {"\n".join(printable(line) for line in os.fsdecode(name).split("\n")) + "/config.pbtxt"
            for name in NAMES.values()} <= files
    text = out["text"].decode()
    assert all(f"{name}/config.pbtxt" in text for name in shown)


# Where a name that is not UTF-8 can sit: the model directory, a file inside it (part of the tree's fingerprint,
# the report cache's key), a version directory, a model directory without a config (a CO101-CO103 subject).
CACHED_NAMES: dict[str, Callable[[bytes], None]] = {
    "model directory": lambda repo: hostile_model(repo, b"m\xff\xfe"),
    "file in a model": lambda repo: write(os.path.join(hostile_model(repo, b"m"), b"1", b"\xffweights.bin"), ""),
    "version directory": lambda repo: os.makedirs(os.path.join(hostile_model(repo, b"m"), b"2\xff")),
    "directory without a config": lambda repo: os.makedirs(os.path.join(repo, b"\xfemodel")),
}


def hostile_model(repo: bytes, name: bytes) -> bytes:
    os.makedirs(os.path.join(repo, name, b"1"), exist_ok=True)
    write(os.path.join(repo, name, b"config.pbtxt"), CONFIG)
    return os.path.join(repo, name)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", CACHED_NAMES)
def test_a_name_that_is_not_utf8_reaches_every_format_through_a_cold_and_a_warm_cache(where, fmt, tree, tmp_path):
    """The report cache keys a run by the repository's file names: a name that is not UTF-8 is a key like any
    other (it was an internal error: UTF-8 refuses the lone surrogates such a name is read as), and the warm
    run answers exactly what the cold one did."""
    repo = under(tmp_path, b"models")
    CACHED_NAMES[where](repo)
    args: Args = ["check", repo, "--container-root", str(tree / "container"), "--format", fmt]
    cold = customops(args, tmp_path, tmp_path / "cache")
    warm = customops(args, tmp_path, tmp_path / "cache")
    for result in (cold, warm):
        assert result.stderr == b"" and result.returncode == 1, result.stderr
        valid_report(fmt, result.stdout)
    assert warm.stdout == cold.stdout
    if fmt != "text":  # the text report is rendered anew (its width follows the terminal)
        assert list((tmp_path / "cache").rglob("*")), "nothing was cached"


def test_no_escape_sequence_from_a_name_reaches_a_forced_color_terminal(tree, tmp_path):
    """With colour forced (FORCE_COLOR, TTY_COMPATIBLE), rich's own styles are the only escape sequences."""
    repo = under(tmp_path, b"models")
    for key in ("ansi-clear", "osc8-hyperlink", "osc52-clipboard", "rich-markup", "every-c0-control"):
        os.makedirs(os.path.join(repo, NAMES[key], b"1"))
        write(os.path.join(repo, NAMES[key], b"config.pbtxt"), CONFIG)
    for forcing in ({"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}):
        result = customops(["check", repo, "--container-root", str(tree / "container"), "--no-cache"], tmp_path,
                           tmp_path / "cache", env=forcing)
        text = result.stdout.decode()
        assert result.returncode == 1
        assert re.sub(r"\x1b\[[0-9;]*m", "", text).count("\x1b") == 0  # only SGR styles remain
        plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
        assert "\\x1b[2J\\x1b[Hclear" in plain and "[bold red]x[link=http:evil]y[blink]" in plain


def test_two_names_that_are_not_utf8_keep_two_fingerprints(tree, tmp_path):
    """Code scanning tracks an alert by its fingerprint: models `m\\xff` and `m\\xfe` are two alerts (a
    fingerprint made with UTF-8's replacement character was one for both)."""
    repo = under(tmp_path, b"models")
    for name in (b"m\xff", b"m\xfe"):
        hostile_model(repo, name)
    result = customops(["check", repo, "--container-root", str(tree / "container"), "--no-cache", "--format",
                        "sarif"], tmp_path, tmp_path / "cache")
    results = json.loads(result.stdout)["runs"][0]["results"]
    by_model: dict[str, set[str]] = {}
    for r in results:
        by_model.setdefault(r["properties"]["model"], set()).add(r["partialFingerprints"]["customops/v1"])
    assert set(by_model) == {"m\\xff", "m\\xfe"} and not by_model["m\\xff"] & by_model["m\\xfe"]
