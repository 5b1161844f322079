"""launch, env and resolve as shell and docker users expect them (issue #18): a server that cannot be run is
127/126 with the shell's words, every note once, a model repository of this machine mounted as `check`
mounts it, `env --fail-on` a gate, and `resolve --root` modelling the container's tritonserver."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.example import install

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model_repository"
SERVER = "/opt/tritonserver/bin/tritonserver"
FINDING = re.compile(r"^(CO\d+) +(error|warning|info) +\S+: (.*)$")
ONLY_CUSTOM = ("--model-control-mode=explicit", "--load-model", "custom")  # the example's model without findings


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """(a working directory with the example repository as ./models, the fixture container root)."""
    work = tmp_path_factory.mktemp("launch-habits")
    shutil.copytree(EXAMPLE, work / "models", ignore=shutil.ignore_patterns("*.so"))
    manifest = work / "models" / "customops.toml"  # without the op library that stops the server at start: these
    manifest.write_text(manifest.read_text().replace('"reranker_pt/ops/libtorch_op_old.so"', ""))  # start it
    return work, install(work / "models")


def customops(args: list[str], cwd: Path, cache: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cache), **env}
    environ.pop("LD_PRELOAD", None)
    environ.pop("LD_LIBRARY_PATH", None)
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd,
                          env=environ, timeout=120)


def findings(text: str) -> list[tuple[str, str, str]]:
    """(code, severity, message) of each finding of a text report: the file column differs in form only."""
    return sorted(m.groups() for line in text.splitlines() if (m := FINDING.match(line)))


# -- a server that cannot be run ------------------------------------------------------------------------


def test_no_check_without_tritonserver_on_path_is_127_not_found_as_a_shell_says(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = customops(["launch", "--no-check", "--", "tritonserver", "--model-repository=/models"], tmp_path,
                       tmp_path / "cache", PATH=str(empty))
    assert result.returncode == 127, result
    assert result.stderr == "customops: tritonserver: not found\n"


def test_a_server_path_that_is_not_executable_is_126_permission_denied(tmp_path):
    server = tmp_path / "tritonserver"
    server.write_text("#!/bin/sh\nexit 0\n")
    server.chmod(0o644)
    result = customops(["launch", "--no-check", "--", str(server), "--model-repository=/models"], tmp_path,
                       tmp_path / "cache")
    assert result.returncode == 126, result
    assert result.stderr == f"customops: {server}: Permission denied\n"


def test_a_non_executable_tritonserver_on_path_is_126_permission_denied_as_bash_says(tmp_path):
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "tritonserver").write_text("#!/bin/sh\nexit 0\n")
    result = customops(["launch", "--no-check", "--", "tritonserver"], tmp_path, tmp_path / "cache",
                       PATH=str(directory))
    assert (result.returncode, result.stderr) == (126, "customops: tritonserver: Permission denied\n"), result


def test_a_directory_named_tritonserver_on_path_is_not_the_server_127_not_found(tmp_path):
    """bash and docker's exec form look for a file: a directory of that name is passed over."""
    directory = tmp_path / "bin"
    (directory / "tritonserver").mkdir(parents=True)
    result = customops(["launch", "--no-check", "--", "tritonserver"], tmp_path, tmp_path / "cache",
                       PATH=str(directory))
    assert (result.returncode, result.stderr) == (127, "customops: tritonserver: not found\n"), result


def test_an_empty_server_name_is_127_not_found_not_an_internal_error(tmp_path):
    result = customops(["launch", "--no-check", "--", ""], tmp_path, tmp_path / "cache")
    assert (result.returncode, result.stderr) == (127, "customops: '': not found\n"), result


# -- notes ----------------------------------------------------------------------------------------------


def test_a_blocked_launch_prints_each_note_once(example, tmp_path):
    """The check's report ends with its notes; launch printed them a second time above it."""
    work, container = example
    result = customops(["launch", "--container-root", str(container), "--dry-run", "--", "tritonserver",
                        "--model-repository=./models"], work, tmp_path / "cache")
    assert result.returncode == 1, result
    mounted = f"mounted {work / 'models'} at /models"
    assert result.stderr.count(mounted) == 1, result.stderr
    assert result.stderr.count("glibc-hwcaps subdirectories are not searched") == 1, result.stderr


def test_a_launch_that_starts_prints_the_checks_notes_once_as_its_own(example, tmp_path):
    work, container = example
    result = customops(["launch", "--container-root", str(container), "--dry-run", "--", "tritonserver",
                        "--model-repository=./models", *ONLY_CUSTOM], work, tmp_path / "cache")
    assert result.returncode == 0, result
    notes = result.stderr.splitlines()
    assert notes.count(f"customops: note: mounted {work / 'models'} at /models") == 1, notes
    assert notes.count("customops: note: using the manifest models/customops.toml") == 1, notes  # as check says
    assert all(line.startswith("customops: note: ") for line in notes), notes


# -- a model repository of this machine -----------------------------------------------------------------


@pytest.mark.parametrize("form", ["--model-repository=./models", "--model-repository ./models",
                                  "--model-repository=models", "--model-repository models",
                                  "--model-repository=ABSOLUTE", "--model-repository ABSOLUTE",
                                  "--model-store=models"])
def test_launch_finds_what_check_finds_for_a_repository_of_this_machine(example, tmp_path, form):
    work, container = example
    checked = customops(["check", "--container-root", str(container), "models"], work, tmp_path / "cache")
    assert checked.returncode == 1 and findings(checked.stdout), checked
    server_args = form.replace("ABSOLUTE", str(work / "models")).split()
    launched = customops(["launch", "--container-root", str(container), "--dry-run", "--", "tritonserver",
                          *server_args], work, tmp_path / "cache")
    assert launched.returncode == 1, launched
    assert findings(launched.stderr) == findings(checked.stdout)
    assert f"note: mounted {work / 'models'} at /models" in launched.stderr


def test_a_repository_of_this_machine_is_mounted_at_models_in_what_launch_starts(example, tmp_path):
    """The preloads the manifest names are exported as the container sees them, at the default mount."""
    work, container = example
    result = customops(["launch", "--container-root", str(container), "--dry-run", "--", "tritonserver",
                        "--model-repository", "models", *ONLY_CUSTOM], work, tmp_path / "cache")
    assert result.returncode == 0, result
    assert "LD_PRELOAD=/models/ranker_pt/ops/libc10_interposer.so:/models/ranker_pt/ops/libtorch_op.so " \
           in result.stdout, result.stdout
    assert " --model-repository models " in result.stdout  # the server's own arguments are not rewritten


def test_two_repositories_of_this_machine_are_mounted_under_models_by_name_as_check_does(example, tmp_path):
    work, container = example
    other = tmp_path / "more"
    (other / "extra" / "1").mkdir(parents=True)
    (other / "extra" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    checked = customops(["check", "--container-root", str(container), "models", str(other)], work,
                        tmp_path / "cache")
    launched = customops(["launch", "--container-root", str(container), "--dry-run", "--", "tritonserver",
                          "--model-repository=models", "--model-repository", str(other)], work, tmp_path / "cache")
    assert (launched.returncode, findings(launched.stderr)) == (checked.returncode, findings(checked.stdout))
    for note in (f"note: mounted {work / 'models'} at /models/models", f"note: mounted {other} at /models/more"):
        assert note in launched.stderr.splitlines() and note in checked.stdout.splitlines(), launched.stderr


def test_a_cached_launch_sees_a_change_to_a_repository_of_this_machine(example, tmp_path):
    """The launch cache fingerprints the directory of this machine that a relative argument names."""
    work, container = example
    mine = tmp_path / "work"
    shutil.copytree(work / "models", mine / "models", symlinks=True)
    argv = ["launch", "--container-root", str(container), "--dry-run", "--", "tritonserver",
            "--model-repository=./models", *ONLY_CUSTOM]
    assert customops(argv, mine, tmp_path / "cache").returncode == 0
    (mine / "models" / "custom" / "config.pbtxt").write_text("backend: mybackend\n")  # a string without quotes
    again = customops(argv, mine, tmp_path / "cache")
    assert again.returncode == 1 and "CO101" in again.stderr, again


def test_a_repository_neither_in_the_container_nor_here_is_one_line_exit_2(example, tmp_path):
    _work, container = example
    result = customops(["launch", "--container-root", str(container), "--dry-run", "--", "tritonserver",
                        "--model-repository=./nowhere"], tmp_path, tmp_path / "cache")
    assert result.returncode == 2, result
    assert result.stderr == ("customops: ./nowhere: model repository does not exist in the container nor as a "
                             "directory of this machine (to mount at /models)\n")


def test_a_repository_inside_the_container_is_still_read_there_before_this_machine(container, tmp_path):
    """`--model-repository=/models` names the container's /models when it has one, not a mount."""
    inside = container / "models"
    (inside / "m" / "1").mkdir(parents=True)
    (inside / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n'
                                               'model_operations { op_library_filename: "/missing.so" }\n')
    result = customops(["launch", "--container-root", str(container), "--dry-run", "--", "tritonserver",
                        "--model-repository=/models"], tmp_path, tmp_path / "cache")
    assert result.returncode == 1 and "CO301" in result.stderr, result
    assert "mounted" not in result.stderr


# -- env --fail-on ---------------------------------------------------------------------------------------


def test_env_fail_on_is_a_gate_findings_at_that_severity_print_no_exports_and_exit_1(example, tmp_path):
    work, container = example
    result = customops(["env", "--fail-on", "warning", "--container-root", str(container), "--", "tritonserver",
                        "--model-repository=models", *ONLY_CUSTOM], work, tmp_path / "cache")
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert "CO401 warning" in result.stderr
    assert result.stderr.endswith("customops: no exports: the check predicts findings at or above --fail-on "
                                  "warning\n")


def test_env_fail_on_below_the_findings_prints_the_exports(example, tmp_path):
    work, container = example
    result = customops(["env", "--fail-on", "error", "--container-root", str(container), "--", "tritonserver",
                        "--model-repository=models", *ONLY_CUSTOM], work, tmp_path / "cache")
    assert result.returncode == 0, result
    assert "export LD_PRELOAD=/models/ranker_pt/ops/libc10_interposer.so:/models/ranker_pt/ops/libtorch_op.so" \
           in result.stdout.splitlines()
    assert all(line.startswith("customops: note: ") for line in result.stderr.splitlines()), result.stderr


def test_env_without_fail_on_checks_nothing(example, tmp_path):
    work, container = example
    result = customops(["env", "--container-root", str(container), "--", "tritonserver",
                        "--model-repository=models"], work, tmp_path / "cache")
    assert result.returncode == 0 and result.stderr == "", result  # the example has errors: not checked
    assert "export LD_LIBRARY_PATH=/opt/tritonserver/backends/pytorch" in result.stdout.splitlines()


# -- resolve --root ---------------------------------------------------------------------------------------


def test_resolve_with_a_root_and_no_host_starts_the_containers_tritonserver(example, tmp_path):
    _work, container = example
    result = customops(["resolve", "--root", str(container), "--format", "json", "--dlopen",
                        "/opt/tritonserver/backends/pytorch/libtriton_pytorch.so"], tmp_path, tmp_path / "cache")
    assert result.returncode == 0, result
    steps = json.loads(result.stdout)["steps"]
    assert (steps[0]["kind"], steps[0]["request"], steps[0]["status"]) == ("startup", SERVER, "loaded")
    assert steps[1]["status"] == "loaded"


def test_resolve_of_tritonserver_starts_in_its_working_directory(example, tmp_path):
    """A relative dlopen path is resolved as the server resolves it: from /opt/tritonserver (the NGC WORKDIR),
    where check's CO104 says it starts."""
    _work, container = example
    result = customops(["resolve", "--root", str(container), "--format", "json", "--dlopen",
                        "backends/pytorch/libtriton_pytorch.so"], tmp_path, tmp_path / "cache")
    assert result.returncode == 0, result
    step = json.loads(result.stdout)["steps"][1]
    assert step["status"] == "loaded" and step["request"] == "/opt/tritonserver/backends/pytorch/libtriton_pytorch.so"


def test_resolve_tree_only_binds_nothing_so_an_undefined_symbol_loads_and_says_so(tree, tmp_path):
    """--tree-only does what libtree and lddtree do (load, search, check versions): the library whose undefined
    data symbol fails the full resolve loads, the output says no symbol was bound, and the parse cache, which
    holds only what binding needs, is neither read nor written."""
    lib = f"{tree}/f/libu.so"
    full = customops(["resolve", "--format", "json", "--dlopen", lib], tmp_path, tmp_path / "full-cache")
    alone = customops(["resolve", "--tree-only", "--format", "json", "--dlopen", lib], tmp_path, tmp_path / "cache")
    assert (full.returncode, alone.returncode) == (1, 0), alone
    assert json.loads(full.stdout)["symbols_bound"] is True
    record = json.loads(alone.stdout)
    assert record["symbols_bound"] is False and record["interpositions"] == []
    assert (record["steps"][-1]["status"], record["steps"][-1]["unresolved"]) == ("loaded", [])
    assert not (tmp_path / "cache").exists()
    text = customops(["resolve", "--tree-only", "--dlopen", lib], tmp_path, tmp_path / "cache")
    assert text.stdout.splitlines()[0] == ("note: --tree-only: no symbol is bound; undefined symbols and "
                                           "interpositions are not reported")


def with_dynamic_entry(library: Path, tag: int, value: int, out: Path) -> Path:
    """A copy of a 64-bit little-endian library with the value of its dynamic entry `tag` replaced."""
    data = bytearray(library.read_bytes())
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    dynamic = next(h for h in (struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize) for i in range(phnum))
                   if h[0] == 2)  # PT_DYNAMIC: (type, flags, offset, vaddr, paddr, filesz, memsz, align)
    for at in range(dynamic[2], dynamic[2] + dynamic[5], 16):
        if struct.unpack_from("<q", data, at)[0] == tag:
            struct.pack_into("<Q", data, at + 8, value)
    out.write_bytes(data)
    return out


def test_resolve_tree_only_refuses_a_library_whose_relocations_lie_outside_it_as_resolve_does(tree, tmp_path):
    """--tree-only skips the pass over the relocations, not the check that their tables lie in the file."""
    lib = with_dynamic_entry(tree / "f/libu.so", 7, 0x7FFF_0000, tmp_path / "libbadrela.so")  # DT_RELA
    steps = [json.loads(customops(["resolve", *mode, "--format", "json", "--dlopen", str(lib)], tmp_path,
                                  tmp_path / "cache").stdout)["steps"][-1] for mode in ([], ["--tree-only"])]
    assert steps[0]["status"] == "failed" and "relocation" in steps[0]["message"], steps[0]
    assert (steps[1]["status"], steps[1]["message"]) == (steps[0]["status"], steps[0]["message"])


def test_resolve_in_a_root_without_tritonserver_says_which_program_it_started(container, tmp_path):
    os.unlink(container / SERVER.lstrip("/"))
    (container / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/true", container / "usr" / "bin" / "true")
    result = customops(["resolve", "--root", str(container)], tmp_path, tmp_path / "cache")
    assert result.stdout.splitlines()[0] == (f"note: no {SERVER} in the target: /usr/bin/true is the host program "
                                             "(use --host to name one)"), result
    assert "startup /usr/bin/true" in result.stdout


def test_resolve_in_a_root_with_no_program_at_all_asks_for_host(tmp_path):
    (tmp_path / "root").mkdir()
    result = customops(["resolve", "--root", str(tmp_path / "root")], tmp_path, tmp_path / "cache")
    assert result.returncode == 2, result
    assert result.stderr.startswith("customops: no host executable in the target (")
    assert result.stderr.endswith("name one with --host\n") and result.stderr.count("\n") == 1
