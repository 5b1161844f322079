"""Groups probed in one sandbox, the framework imported once and a process forked per group
(customops.probe.batch, customops/probe/child_forks.py), against the reference: each group probed in a sandbox
of its own (customops.probe.frameworks.probe_group). Same results, and a group that crashes, hangs or leaves a
process behind takes nothing of the next group with it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from customops.probe import sandbox
from customops.probe.batch import probe_groups, split
from customops.probe.frameworks import probe_group
from customops.probe.results import ProbeResult, ProbeStatus


def same(result: ProbeResult) -> tuple:
    """What a result says about its library (its output, which holds the sandbox's paths, aside)."""
    return (result.library, result.status, result.message, result.signal, result.registered, result.framework_version,
            result.builtin_namespaces)


def library(directory: Path, name: str, constructor: str) -> str:
    path = directory / f"lib{name}.so"
    source = ("#include <dirent.h>\n#include <signal.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
              f"__attribute__((constructor)) static void run(void) {{ {constructor} }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), "-x", "c", "-"], input=source, text=True, check=True)
    return str(path)


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("batch")
    return {"quiet": library(directory, "quiet", ""),
            "aborts": library(directory, "aborts", 'fprintf(stderr, "what():  it aborts\\n"); abort();'),
            "hangs": library(directory, "hangs", "for (;;) pause();"),
            "exits": library(directory, "exits", "_exit(7);"),
            "leaves": library(directory, "leaves", "if (fork() == 0) { setsid(); for (;;) pause(); }")}


def test_each_group_gets_what_it_gets_in_a_sandbox_of_its_own(libraries):
    groups = ((libraries["quiet"],), (libraries["aborts"],), (libraries["quiet"], libraries["aborts"]),
              (libraries["exits"], libraries["quiet"]), (libraries["leaves"], libraries["quiet"]))
    batched = probe_groups(groups, timeout=20)
    alone = tuple(probe_group(group, timeout=20) for group in groups)
    assert [[same(r) for r in group] for group in batched] == [[same(r) for r in group] for group in alone]
    assert batched[1][0].status is ProbeStatus.CRASHED and "SIGABRT" in batched[1][0].message
    assert "what():  it aborts" in batched[1][0].output  # the group's own output


def test_a_hanging_library_times_out_its_own_group_only(libraries):
    hung, after = probe_groups(((libraries["hangs"],), (libraries["quiet"],)), timeout=2)
    assert hung[0].status is ProbeStatus.TIMED_OUT and after[0].status is ProbeStatus.LOADED


def test_torch_op_libraries_batched_are_what_they_are_alone():
    from fixtures import torch_ops

    try:
        directory = torch_ops.build()
    except LookupError as exc:
        pytest.skip(str(exc))
    a, b = str(directory / "liblabops_a.so"), str(directory / "liblabops_b.so")
    groups = ((a,), (b,), (a, b))
    batched = probe_groups(groups, framework="torch", timeout=60)
    alone = tuple(probe_group(group, framework="torch", timeout=60) for group in groups)
    assert [[same(r) for r in group] for group in batched] == [[same(r) for r in group] for group in alone]
    assert batched[2][1].status is ProbeStatus.CRASHED  # the second TORCH_LIBRARY of a namespace aborts


def run(*messages: tuple[str, ...]) -> sandbox.Run:
    return sandbox.Run(messages, 0, False, "", (), "")


def test_each_group_is_its_lines_status_output_and_files_as_the_loader_ended_it():
    first, second, never = split(run(("VERSION", "2.13"), ("G", "0", "LOADED", "/a.so"),
                                     ("ENDED", "0", "0", "out0", "1", '["left.txt"]'),
                                     ("G", "1", "LOADED", "/b.so"), ("ENDED", "1", "-6", "out1", "", "[]"),
                                     ("UNBATCHED", "group 1 left processes that could not be ended")), 3)
    assert first is not None and second is not None and never is None  # probed again, alone
    assert first.messages == (("VERSION", "2.13"), ("LOADED", "/a.so"), ("END",)) and first.output == "out0"
    assert first.files == ("left.txt",) and first.exit_status == 0
    assert second.messages == (("VERSION", "2.13"), ("LOADED", "/b.so")) and second.exit_status == -6


def test_a_groups_process_holds_no_descriptor_but_its_own_pipes(libraries, tmp_path):
    """The private result channel is closed in a group's process before its library loads: nothing it does
    can write another group's lines (it only has stdout/stderr, and the pipe for its own lines)."""
    lister = library(tmp_path, "lister", 'DIR *d = opendir("/proc/self/fd"); struct dirent *e; '
                     'while ((e = readdir(d))) fprintf(stderr, "fd %s\\n", e->d_name);')
    listed, after = probe_groups(((lister,), (libraries["quiet"],)), timeout=20)
    open_fds = sorted(int(line[3:]) for line in listed[0].output.splitlines() if line.startswith("fd ")
                      and line[3:].isdigit())
    assert len(open_fds) == 5 and open_fds[:3] == [0, 1, 2], listed[0].output  # + its lines' pipe, the listing
    assert after[0].status is ProbeStatus.LOADED


def test_a_library_that_kills_the_loader_costs_time_not_another_groups_result(libraries, tmp_path):
    killer = library(tmp_path, "killer", "kill(getppid(), 9); pause();")
    hit, after = probe_groups(((killer,), (libraries["quiet"],)), timeout=20)
    assert [same(r) for r in after] == [same(r) for r in probe_group((libraries["quiet"],), timeout=20)]
    assert hit[0].library == killer
