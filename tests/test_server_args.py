"""tritonserver's command line as the server reads it: customops.triton.serverargs against glibc's own getopt_long,
given the same long options (customops/data/tritonserver-options.json, from the server's command_line_parser.cc)
in a small C program. For every command line both must agree on each option read and its value, or both refuse
it; then `check -- tritonserver ARGS` decides what `launch -- tritonserver ARGS` decides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from customops.errors import CustomopsError
from customops.triton.serverargs import parse, server_options

GETOPT = r"""
#include <getopt.h>
#include <stdio.h>
#include <string.h>
static struct option options[] = {
%s
  {0, 0, 0, 0}};
static const char *ids[] = {%s};
int main(int argc, char **argv) {
  int index = 0, c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", options, &index)) != -1) {
    if (c == '?') { printf("REFUSED\n"); return 0; }
    printf("%%s=%%s\n", ids[c - 1000], optarg ? optarg : "");
  }
  if (optind < argc) printf("REFUSED\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def getopt(tmp_path_factory) -> Path:
    options = list(server_options().values())
    ids = sorted({o.id for o in options})
    rows = "\n".join(f'  {{"{o.name}", {"required_argument" if o.argument else "no_argument"}, 0, '
                     f'{1000 + ids.index(o.id)}}},' for o in options)
    source = tmp_path_factory.mktemp("getopt") / "getopt.c"
    source.write_text(GETOPT % (rows, ", ".join(json.dumps(i) for i in ids)))
    program = source.with_suffix("")
    subprocess.run(["gcc", "-o", str(program), str(source)], check=True)
    return program


def glibc_reads(program: Path, argv: list[str]) -> list[str]:
    lines = subprocess.run([str(program), *argv[1:]], capture_output=True, text=True, check=True).stdout.splitlines()
    return ["REFUSED"] if "REFUSED" in lines else _by_option(lines)


def customops_reads(argv: list[str]) -> list[str]:
    try:
        args = parse(argv)
    except CustomopsError:
        return ["REFUSED"]
    return _by_option([f"{option}={value}" for option, values in args.options.items() for value in values])


def _by_option(lines: list[str]) -> list[str]:
    """Each option's values in the order given (the order across options is not something either keeps)."""
    return sorted(lines, key=lambda line: line.split("=", 1)[0])


COMMAND_LINES = {
    "both_syntaxes": ["tritonserver", "--model-repository=/a", "--model-store", "/b"],
    "a_unique_prefix_stands_for_the_option": ["tritonserver", "--model-repo=/m", "--backend-dir", "/b"],
    "two_names_of_one_option_are_not_ambiguous": ["tritonserver", "--model-re=/m"],
    "an_ambiguous_prefix_is_refused": ["tritonserver", "--model=/m"],
    "the_next_word_is_the_value_whatever_it_looks_like": ["tritonserver", "--model-repository", "--strict-readiness"],
    "a_missing_value_is_refused": ["tritonserver", "--model-repository"],
    "a_flag_without_argument_takes_no_value": ["tritonserver", "--disable-auto-complete-config=true"],
    "a_flag_without_argument": ["tritonserver", "--disable-auto-complete-config", "--model-repository=/m"],
    "a_word_that_is_not_an_option_is_refused": ["tritonserver", "--model-repository=/m", "stray"],
    "a_short_option_is_refused": ["tritonserver", "-m", "/m"],
    "double_dash_ends_the_options": ["tritonserver", "--model-repository=/m", "--", "--exit-on-error=false"],
    "an_exact_name_wins_over_longer_ones": ["tritonserver", "--id=x", "--log-file=/l"],
}


@pytest.mark.parametrize("argv", COMMAND_LINES.values(), ids=COMMAND_LINES.keys())
def test_options_are_read_as_glibc_getopt_long_reads_them(getopt: Path, argv: list[str]) -> None:
    assert customops_reads(argv) == glibc_reads(getopt, argv)


def test_an_option_this_server_does_not_declare_is_passed_on_and_named(getopt: Path) -> None:
    """glibc refuses it, but the table is one server's: a newer release may declare it, and blocking a server
    that would start is worse than naming what was not checked."""
    argv = ["tritonserver", "--model-repository=/m", "--some-new-option", "v", "--exit-on-error=false"]
    assert glibc_reads(getopt, argv) == ["REFUSED"]
    args = parse(argv)
    assert args.unknown == ("--some-new-option",) and not args.exit_on_error


def test_the_values_customops_uses_are_checked_as_tritonserver_checks_them() -> None:
    with pytest.raises(CustomopsError, match="invalid value for bool option: maybe"):
        parse(["tritonserver", "--model-repository=/m", "--exit-on-error=maybe"])
    with pytest.raises(CustomopsError, match="requires setting '--model-control-mode=explicit'"):
        parse(["tritonserver", "--model-repository=/m", "--load-model=a"])
    args = parse(["tritonserver", "--model-repository=/m", "--strict-model-config=TRUE",
                  "--model-control-mode=EXPLICIT", "--load-model=a"])
    assert not args.auto_complete and args.models_to_check == {"a"}


def test_cloud_repositories_are_told_apart_from_local_ones() -> None:
    args = parse(["tritonserver", "--model-repository=s3://bucket/models", "--model-repository=/models"])
    assert args.cloud_repositories == ("s3://bucket/models",) and args.local_repositories == ("/models",)


def customops(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "customops", *argv], capture_output=True, text=True, cwd=cwd)


def test_check_reads_the_server_command_line_as_launch_does(example, tmp_path: Path) -> None:
    """The same command line: check's JSON verdict is what launch's check decides (its exit status)."""
    repo, root = example
    server = ["--", "tritonserver", f"--model-repo={repo}", "--disable-auto-complete-config",
              "--model-control-mode=explicit", "--load-model=custom", "--load-model=ghost"]
    checked = customops("check", "--container-root", str(root), "--format", "json", "--no-cache", *server,
                        cwd=tmp_path)
    report = json.loads(checked.stdout)
    assert {m["name"] for m in report["models"]} == {"custom"}
    assert "CO108" in {f["code"] for f in report["findings"]}
    launched = customops("launch", "--container-root", str(root), "--dry-run", "--no-cache", *server, cwd=tmp_path)
    assert (checked.returncode, launched.returncode) == (1, 1)
    assert "failed to poll model 'ghost'" in launched.stderr


def test_a_cloud_repository_does_not_stop_the_server_and_is_named_as_unchecked(example, tmp_path: Path) -> None:
    _, root = example
    server = ["--", "tritonserver", "--model-repository=s3://bucket/models"]
    launched = customops("launch", "--container-root", str(root), "--dry-run", "--no-cache", *server, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr
    assert "not checked: the models of s3://bucket/models" in launched.stderr
    checked = customops("check", "--container-root", str(root), "--no-cache", *server, cwd=tmp_path)
    assert checked.returncode == 0 and "not checked: the models of s3://bucket/models" in checked.stdout


def test_a_command_line_the_server_refuses_is_bad_input(example, tmp_path: Path) -> None:
    repo, root = example
    checked = customops("check", "--container-root", str(root), "--", "tritonserver", f"--model={repo}", cwd=tmp_path)
    assert checked.returncode == 2
    assert checked.stderr.startswith("customops: tritonserver would refuse its command line: option '--model' is "
                                     "ambiguous")


WORDS = ["--model-repository", "--model-repo", "--model", "--model-store", "--disable-auto-complete-config",
         "--disable", "--exit-on-error", "--load-model", "--model-control-mode", "--backend-config", "--help", "--",
         "-m", "-", "/models", "true", "explicit", "tensorrt,plugins=/a.so", ""]


@given(st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(["", "=", "=x", "=true"])), max_size=6))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_mix_of_options_and_words_is_read_as_glibc_reads_it(getopt: Path, words) -> None:  # type: ignore[no-untyped-def]
    argv = ["tritonserver", *(w + (tail if w.startswith("--") and w != "--" else "") for w, tail in words)]
    ours = customops_reads(argv)
    if ours != ["REFUSED"] and parse(argv).unknown:
        return  # passed on on purpose (test_an_option_this_server_does_not_declare_is_passed_on_and_named)
    if ours == ["REFUSED"] and glibc_reads(getopt, argv) != ["REFUSED"]:
        with pytest.raises(CustomopsError, match=r"Bad option|Error:|invalid argument|expected <backend>"):
            parse(argv)  # getopt_long reads it; TritonParser then refuses a value
        return
    assert ours == glibc_reads(getopt, argv)
