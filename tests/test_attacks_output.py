"""Attacks on what customops prints (issue #15): one test per attack, each run against the real CLI, each
asserting that the attack fails: no forged annotation, no broken document, no escape sequence reaching a
terminal, no command run by `eval`, and the checker's exit status what it promises (never 3, never a
traceback)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from test_hostile_cli import (
    CONFIG,
    customops,
    github_commands,
    hostile_repo,
    launchable,
    recording_server,
    server_args,
    under,
    write,
)

CLEAR = b"\x1b[2J"
OSC52 = b"\x1b]52;c;cm0gLXJmIH4=\x07"


def check(t: Path, tree: Path, repo: bytes, *options: str | bytes, **kw) -> subprocess.CompletedProcess[bytes]:
    return customops(["check", repo, "--container-root", str(tree / "container"), "--no-cache", *options], t,
                     t / "cache", **kw)


def clean_failure(result: subprocess.CompletedProcess[bytes], status: int, message: str) -> None:
    err = result.stderr.decode()
    assert result.returncode == status and err == f"customops: {message}\n", (result.returncode, err)


def test_github_annotation_forged_by_a_newline_in_a_directory_name(tree, tmp_path):
    repo = hostile_repo(tmp_path, b"m\n::notice file=README.md::All checks passed")
    result = check(tmp_path, tree, repo, "--format", "github")
    commands = github_commands(result.stdout.decode())  # one command per line, or it fails
    assert result.returncode == 1 and len(commands) == len(result.stdout.splitlines()) == 3
    assert {props.get("file") for _c, props, _m in commands} == {
        "m\n::notice file=README.md::All checks passed/config.pbtxt"}  # GitHub decodes the exact path


def test_github_annotation_properties_broken_by_colons_and_commas(tree, tmp_path):
    repo = hostile_repo(tmp_path, b"a,title=forged::b%0A")
    commands = github_commands(check(tmp_path, tree, repo, "--format", "github").stdout.decode())
    assert {props["file"] for _c, props, _m in commands} == {"a,title=forged::b%0A/config.pbtxt"}
    assert all(props["title"].startswith("CO") for _c, props, _m in commands)


def test_junit_made_invalid_by_control_characters_and_non_utf8_names(tree, tmp_path):
    names = [b"c" + bytes(range(1, 32)).replace(b"/", b""), b"\xff\xfe\xed\xa0\x80", b"x]]><&\"'", b"\x7f\xc2\x9b"]
    repo = under(tmp_path, b"models")
    for name in names:
        os.makedirs(os.path.join(repo, name, b"1"))
        write(os.path.join(repo, name, b"config.pbtxt"), CONFIG)
    result = check(tmp_path, tree, repo, "--format", "junit")
    suite = ET.fromstring(result.stdout)  # well-formed XML 1.0, whatever the names
    assert result.returncode == 1 and len(suite) == len(names)
    shown = {case.get("name") for case in suite}
    assert "x]]><&\"'" in shown and "\\xff\\xfe\\xed\\xa0\\x80" in shown
    assert "c\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08\\t\\n\\x0b\\x0c\\r" in "".join(shown)


def test_terminal_escape_sequences_in_file_names(tree, tmp_path):
    repo = hostile_repo(tmp_path, CLEAR + OSC52 + b"\x1b]8;;http:evil\x1b\\x")
    for forcing in ({}, {"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1"}):
        result = check(tmp_path, tree, repo, env=forcing)
        plain = re.sub(rb"\x1b\[[0-9;]*m", b"", result.stdout)  # rich's own styles, when colour is forced
        assert result.returncode == 1 and b"\x1b" not in plain and b"\x07" not in plain
        assert b"\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b]8;;http:evil\\x1b\\x/config.pbtxt" in plain


def test_rich_markup_in_file_names(tree, tmp_path):
    repo = hostile_repo(tmp_path, b"[bold red]x[link=http:evil]y[blink]:smile:")
    result = check(tmp_path, tree, repo, env={"FORCE_COLOR": "1"})
    plain = re.sub(rb"\x1b\[[0-9;]*m", b"", result.stdout)
    assert b"[bold red]x[link=http:evil]y[blink]:smile:/config.pbtxt" in plain
    assert b"\x1b]8" not in result.stdout  # no hyperlink made of [link=...]


def test_non_utf8_names_break_json_and_sarif(tree, tmp_path):
    repo = hostile_repo(tmp_path, b"bad\xff\xfe")
    report = json.loads(check(tmp_path, tree, repo, "--format", "json").stdout.decode("utf-8"))
    assert report["summary"]["exit_code"] == 1 and report["models"][0]["name"] == "bad\\xff\\xfe"
    assert report["models"][0]["config"] == "bad\\xff\\xfe/config.pbtxt"
    result = check(tmp_path, tree, repo, "--format", "sarif")
    sarif = json.loads(result.stdout.decode("utf-8"))
    assert result.returncode == 1
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"][0]["results"]
            if "locations" in r} == {"bad%FF%FE/config.pbtxt"}


def test_non_utf8_names_break_launch(tree, tmp_path):
    repo = launchable(tmp_path, tree, b"r\xff\xfe")
    server = recording_server(tmp_path)
    for options in ([], ["--no-check"]):
        result = customops(["launch", "--no-cache", *options, *server_args(tree, repo, server)], tmp_path,
                           tmp_path / "cache")
        assert result.returncode == 0, result.stderr
        preload, *argv = (tmp_path / "record").read_bytes().split(b"\0")[:-1]
        assert preload == repo + b"/m/ops/libtorch_op.so" and argv[0] == b"--model-repository=" + repo


def test_shell_injection_through_customops_env(tree, tmp_path):
    """The issue's attack: a manifest path with a newline ended the comment line `env` printed."""
    repo = launchable(tmp_path, tree, b"x\ntouch PWNED\n$(touch PWNED)`touch PWNED`'\"",
                      '[tensorrt]\nplugins = ["m/ops/libtorch_op.so"]\n[pytorch]\nops = []\n')
    other = launchable(tmp_path, tree, b"y$(touch${IFS}PWNED)`touch${IFS}PWNED`'\"")
    for repository in (repo, other):
        printed = customops(["env", *server_args(tree, repository)], tmp_path, tmp_path / "cache")
        assert printed.returncode == 0, printed.stderr
        script = tmp_path / "exports"
        script.write_bytes(printed.stdout)
        shell = subprocess.run(["bash", "-c", 'eval "$(cat "$1")" && printf "%s" "${LD_PRELOAD-}"', "bash",
                                str(script)], cwd=tmp_path, capture_output=True, timeout=60)
        assert shell.returncode == 0 and not list(tmp_path.rglob("PWNED")), shell.stderr
        assert all(line.startswith((b"export ", b"# ")) for line in printed.stdout.splitlines())
    assert shell.stdout == other + b"/m/ops/libtorch_op.so"


def test_shell_injection_through_launch_dry_run(tree, tmp_path):
    repo = launchable(tmp_path, tree, b"$(touch${IFS}PWNED)`touch${IFS}PWNED`'\"")
    server = recording_server(tmp_path)
    printed = customops(["launch", "--dry-run", "--no-check", *server_args(tree, repo, server)], tmp_path,
                        tmp_path / "cache")
    assert printed.returncode == 0 and printed.stdout.count(b"\n") == 1, printed.stderr
    subprocess.run(["bash", "-c", printed.stdout], cwd=tmp_path, check=True, timeout=60,
                   env={**os.environ, "RECORD": str(tmp_path / "record")})
    assert not list(tmp_path.rglob("PWNED"))
    assert (tmp_path / "record").read_bytes().split(b"\0")[:2] == [repo + b"/m/ops/libtorch_op.so",
                                                                   b"--model-repository=" + repo]


def test_manifest_paths_with_control_characters(tree, tmp_path):
    repo = launchable(tmp_path, tree, b"r", '[pytorch]\nops = ["m/ops/\\u001b[2J\\nlib.so"]\n')
    for command in (["env", *server_args(tree, repo)], ["check", repo, "--container-root", "/", "--no-cache"]):
        clean_failure(customops(command, tmp_path, tmp_path / "cache"), 2,
                      f"{tmp_path}/r/models/customops.toml: CO106 [pytorch] ops: 'm/ops/\\x1b[2J\\nlib.so' contains "
                      "a control character")


def test_preload_with_a_control_character(tree, tmp_path):
    """A preload under a directory with a newline: refused by env (CO307, exit 2), reported by check."""
    repo = launchable(tmp_path, tree, b"r\nx")
    result = customops(["env", *server_args(tree, repo)], tmp_path, tmp_path / "cache")
    assert result.returncode == 2 and result.stderr.startswith(b"customops: CO307 LD_PRELOAD entry ")
    assert result.stderr.count(b"\n") == 1 and b"r\\nx/models" in result.stderr
    checked = customops(["check", repo, "--container-root", "/", "--no-cache", "--format", "json"], tmp_path,
                        tmp_path / "cache")
    assert "CO307" in {f["code"] for f in json.loads(checked.stdout)["findings"]}


def test_output_into_a_missing_directory_or_a_full_disk(tree, tmp_path):
    repo = hostile_repo(tmp_path, b"m")
    for fmt in ("text", "json"):
        clean_failure(check(tmp_path, tree, repo, "--format", fmt, "--output", str(tmp_path / "no/r")), 2,
                      f"{tmp_path}/no/r: No such file or directory")
        clean_failure(check(tmp_path, tree, repo, "--format", fmt, "--output", "/dev/full"), 2,
                      "/dev/full: No space left on device")


def test_full_standard_output(tree, tmp_path):
    with open("/dev/full", "w") as full:
        result = check(tmp_path, tree, hostile_repo(tmp_path, b"m"), "--format", "sarif", stdout=full.fileno())
    clean_failure(result, 2, "standard output: No space left on device")


def test_closed_standard_output(tree, tmp_path):
    repo = hostile_repo(tmp_path, b"m")
    command = [sys.executable, "-m", "customops", "check", repo, "--container-root", str(tree / "container"),
               "--no-cache", "--format", "json"]
    result = subprocess.run(command, stderr=subprocess.PIPE, cwd=tmp_path, timeout=120,
                            preexec_fn=lambda: os.close(1))
    clean_failure(result, 2, "standard output: Bad file descriptor")
    written = check(tmp_path, tree, repo, "--format", "json", "--output", str(tmp_path / "r.json"),
                    stdout=subprocess.DEVNULL)
    assert written.returncode == 1 and json.loads((tmp_path / "r.json").read_text())  # --output needs no stdout


def test_broken_pipe(tree, tmp_path):
    """The reader exits before customops writes (`customops check ... | head -c1`): quiet, 141 as grep."""
    repo = hostile_repo(tmp_path, b"m")
    proc = subprocess.Popen([sys.executable, "-m", "customops", "check", repo, "--container-root",
                             str(tree / "container"), "--no-cache", "--format", "json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141 and proc.stderr.read() == b""


def test_missing_or_non_executable_server(tree, tmp_path):
    """As a shell says it: 127 and "not found" (a path: "No such file or directory"), 126 and "Permission
    denied", with the check and without."""
    repo = launchable(tmp_path, tree)
    (tmp_path / "plain").write_text("#!/bin/sh\n")
    for options in ([], ["--no-check"]):
        for server, status, message in (("no-such-server", 127, b"customops: no-such-server: not found\n"),
                                        (str(tmp_path / "gone"), 127, b"gone: No such file or directory\n"),
                                        (str(tmp_path / "plain"), 126, b"plain: Permission denied\n")):
            result = customops(["launch", "--no-cache", *options, *server_args(tree, repo, server)], tmp_path,
                               tmp_path / "cache")
            assert result.returncode == status and result.stderr.endswith(message), result.stderr
            assert b"Traceback" not in result.stderr


def test_deeply_nested_manifest(tree, tmp_path):
    repo = hostile_repo(tmp_path, b"m")
    for nested in ("[" * 50_000 + "]" * 50_000, "{a=" * 50_000 + "1" + "}" * 50_000):
        write(os.path.join(repo, b"customops.toml"), f"[pytorch]\nops = {nested}\n")
        result = check(tmp_path, tree, repo)
        assert result.returncode == 2 and result.stderr.count(b"\n") == 1 and b"CO106" in result.stderr


def test_sigterm_during_a_check(tmp_path, tree):
    """SIGTERM while a probe runs: exit 143 after the cleanup, no traceback, the probe's process gone."""
    started = tmp_path / "started"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 67.25\n")
    python.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "customops", "probe", str(tree / "e/libvuser.so"), "--python",
                             str(python)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the exec of sleep
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert proc.stderr is not None and b"Traceback" not in proc.stderr.read()
    assert not [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p) == b"sleep\x0067.25\x00"]


def _cmdline(process: Path) -> bytes:
    try:
        return (process / "cmdline").read_bytes()
    except OSError:
        return b""


def test_usage_errors_with_escape_sequences(tmp_path):
    result = customops(["check", "--format", CLEAR, b"--" + OSC52], tmp_path, tmp_path / "cache")
    assert result.returncode == 2 and b"\x1b" not in result.stderr and b"\x07" not in result.stderr
    assert b"Traceback" not in result.stderr
