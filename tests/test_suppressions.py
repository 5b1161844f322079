"""Selecting and suppressing findings as ruff users expect (#18): --select/--ignore and [check] select/ignore
(codes and prefixes), [check] ignore tables with a reason, `# customops: ignore[...]` comments in a
config.pbtxt, and CO107 for a suppression that suppresses nothing. The example repository (a copy) against
the fixture container, through the CLI in this process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from customops.app.suppressions import DirectiveKind, parse_directives
from customops.cli import main
from customops.selection import selected
from fixtures.example import install

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model_repository"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> set[str]:
    """The codes the example reports against the fixture container, with nothing selected or suppressed
    (README's sample: CO104 and CO301 in tokenizer_ort's config.pbtxt, CO308 on an op library, CO401, ...)."""
    repo = tmp_path_factory.mktemp("base") / "model_repository"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("*.so"))
    container = install(repo)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", str(repo), "--container-root", str(container), "--no-cache", "--format", "json"])
    found = {f["code"] for f in json.loads(out.getvalue())["findings"]}
    assert {"CO104", "CO301", "CO308", "CO401"} <= found and not any(c.startswith("CO1") for c in found - {"CO104"})
    return found


def having(base: set[str], *prefixes: str) -> set[str]:
    return {c for c in base if c.startswith(prefixes)}


def run(capsys, example, *args: str) -> tuple[int, str, str]:
    repo, container = example
    try:
        code = main(["check", str(repo), "--container-root", str(container), "--no-cache", "--color", "never",
                     *args])
    except SystemExit as exc:  # a usage error: argparse exits
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def report(capsys, example, *args: str) -> dict:
    code, out, err = run(capsys, example, "--format", "json", *args)
    assert code in (0, 1), err
    return json.loads(out)  # type: ignore[no-any-return]


def codes(record: dict) -> set[str]:
    return {f["code"] for f in record["findings"]}


def add_to_manifest(repo: Path, text: str) -> None:
    with open(repo / "customops.toml", "a") as f:
        f.write(text)


def append_to_config(repo: Path, model: str, text: str) -> None:
    with open(repo / model / "config.pbtxt", "a") as f:
        f.write(text)


def line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# -- selection ---------------------------------------------------------------------------------------------


def test_select_prefix_keeps_only_that_family(capsys, example, base):
    record = report(capsys, example, "--select", "CO3")
    assert codes(record) == having(base, "CO3") and "CO308" in codes(record)
    assert record["summary"]["suppressed"] == 0


def test_select_and_ignore_take_comma_separated_lists_and_repeat(capsys, example, base):
    assert codes(report(capsys, example, "--select", "CO30,CO5", "--select", "CO401")) == having(
        base, "CO30", "CO5", "CO401")
    assert codes(report(capsys, example, "--ignore", "CO3,CO5", "--ignore", "CO104")) == (
        base - having(base, "CO3", "CO5", "CO104"))


def test_the_more_specific_selector_wins_and_ignore_wins_a_tie(capsys, example, base):
    assert codes(report(capsys, example, "--select", "CO301", "--ignore", "CO3")) == {"CO301"}
    assert codes(report(capsys, example, "--select", "CO3", "--ignore", "CO301")) == having(base, "CO3") - {"CO301"}
    assert codes(report(capsys, example, "--select", "CO301", "--ignore", "CO301")) == set()
    assert selected("CO302", None, ()) and not selected("CO302", (), ())


def test_deselected_findings_are_not_reported_nor_counted_as_suppressed(capsys, example, base):
    record = report(capsys, example, "--ignore", "CO3,CO5,CO2")
    assert codes(record) == base - having(base, "CO3", "CO5", "CO2") and "CO308" not in codes(record)
    assert record["summary"]["suppressed"] == 0 and record["suppressed"] == []


def test_manifest_select_and_code_strings_in_ignore(capsys, example, base):
    repo, _container = example
    add_to_manifest(repo, 'select = ["CO3", "CO5"]\nignore = ["CO308", { code = "CO301" }]\n')
    record = report(capsys, example)
    assert codes(record) == having(base, "CO3", "CO5") - {"CO308", "CO301"}
    assert [f["code"] for f in record["suppressed"]] == ["CO301"]  # a table suppresses; a string deselects


def test_cli_select_replaces_the_manifests_and_cli_ignore_adds_to_it(capsys, example, base):
    repo, _container = example
    add_to_manifest(repo, 'select = ["CO3"]\nignore = ["CO308"]\n')
    assert codes(report(capsys, example, "--select", "CO30,CO401", "--ignore", "CO301")) == (
        having(base, "CO30", "CO401") - {"CO308", "CO301"}) and "CO401" in base


def test_unknown_code_in_select_is_a_usage_error(capsys, example):
    code, out, err = run(capsys, example, "--select", "CO3,CO9")
    assert code == 2 and out == "" and "--select: unknown code or prefix 'CO9'" in err
    code, _out, err = run(capsys, example, "--ignore", "CO1011")
    assert code == 2 and "--ignore: unknown code or prefix 'CO1011'" in err
    code, _out, err = run(capsys, example, "--select", "co3")  # codes are upper case, as ruff's
    assert code == 2 and "'co3'" in err


def test_unknown_code_in_the_manifests_select_is_CO106(capsys, example):
    repo, _container = example
    add_to_manifest(repo, 'select = ["CO3", "E501"]\n')
    code, _out, err = run(capsys, example)
    assert code == 2 and "CO106 [check] select: unknown code or prefix 'E501'" in err


# -- manifest suppressions ---------------------------------------------------------------------------------


def test_reason_shown_with_the_suppressed_finding_in_verbose_and_json(capsys, example):
    repo, _container = example
    add_to_manifest(repo, '\n[[check.ignore]]\ncode = "CO104"\nreason = "cwd is set"\n')
    line = line_of(repo / "customops.toml", 'code = "CO104"')
    record = report(capsys, example)
    assert "CO104" not in codes(record) and record["summary"]["suppressed"] == 1
    [hidden] = record["suppressed"]
    assert hidden["code"] == "CO104" and hidden["file"] == "tokenizer_ort/config.pbtxt"
    assert hidden["suppression"] == {"source": "manifest", "file": "customops.toml", "line": line,
                                     "reason": "cwd is set"}
    _code, verbose, _err = run(capsys, example, "-v")
    assert f"by customops.toml:{line}: cwd is set" in verbose
    _code, default, _err = run(capsys, example)
    assert "cwd is set" not in default and "; 1 suppressed;" in default


def test_the_json_report_with_suppressed_findings_follows_its_schema(capsys, example):
    from jsonschema import Draft202012Validator

    repo, _container = example
    add_to_manifest(repo, 'ignore = [{ code = "CO104" }, { code = "CO402", reason = "stale" }]\n')
    append_to_config(repo, "tokenizer_ort", "# customops: ignore-file[CO301]\n")
    record = report(capsys, example)
    schema = json.loads((ROOT / "customops" / "schemas" / "check-1.json").read_text())
    Draft202012Validator(schema).validate(record)
    assert {f["suppression"]["source"] for f in record["suppressed"]} == {"manifest", "config"}


def test_unused_manifest_ignore_is_CO107_at_its_line(capsys, example):
    repo, _container = example
    add_to_manifest(repo, 'ignore = [\n  { code = "CO104" },\n  { code = "CO402", symbol = "deflate*" },\n]\n')
    line = line_of(repo / "customops.toml", 'code = "CO402"')
    record = report(capsys, example)
    [unused] = [f for f in record["findings"] if f["code"] == "CO107"]
    assert (unused["file"], unused["line"], unused["severity"]) == ("customops.toml", line, "warning")
    assert unused["message"] == "[check] ignore entry for CO402 (symbol 'deflate*') matches no finding"


def test_CO107_is_suppressible_with_ignore_and_select(capsys, example):
    repo, _container = example
    add_to_manifest(repo, 'ignore = [{ code = "CO402" }]\n')
    assert "CO107" in codes(report(capsys, example))
    assert "CO107" not in codes(report(capsys, example, "--ignore", "CO107"))
    assert "CO107" not in codes(report(capsys, example, "--select", "CO4"))  # CO107 not selected
    assert "CO107" in codes(report(capsys, example, "--select", "CO4,CO107"))


def test_an_ignore_for_a_code_not_selected_is_not_unused(capsys, example, base):
    repo, _container = example
    add_to_manifest(repo, 'ignore = [{ code = "CO402" }]\n')
    assert codes(report(capsys, example, "--select", "CO3,CO107")) == having(base, "CO3")


def test_unused_ignore_is_not_reported_when_load_model_checks_a_subset(capsys, example):
    repo, _container = example
    add_to_manifest(repo, 'ignore = [{ code = "CO402" }, { code = "CO104" }]\n')
    append_to_config(repo, "detector_ort", "# customops: ignore-file[CO201]\n")
    assert "CO107" not in codes(report(capsys, example, "--load-model", "detector_ort"))


def test_unused_ignore_is_reported_only_for_codes_a_facts_only_run_can_produce(capsys, example):
    repo, _container = example
    add_to_manifest(repo, 'ignore = [{ code = "CO402" }, { code = "CO105" }]\n')
    main(["check", str(repo), "--triton-release", "25.03", "--no-cache", "--format", "json"])  # no libraries
    record = json.loads(capsys.readouterr().out)
    assert [f["message"] for f in record["findings"] if f["code"] == "CO107"] == [
        "[check] ignore entry for CO105 matches no finding"]


def test_unused_probe_code_ignore_is_not_reported_without_probe(capsys, example):
    repo, _container = example
    add_to_manifest(repo, 'ignore = [{ code = "CO409" }, { code = "CO507" }]\n')
    assert "CO107" not in codes(report(capsys, example))


# -- inline suppressions in config.pbtxt ---------------------------------------------------------------------


def broken_config(repo: Path, comment_on_error_line: str = "", comment_before: str = "") -> Path:
    """The `custom` model with a CO101 at line 3 (the only kind of finding with a line in a config.pbtxt)."""
    config = repo / "custom" / "config.pbtxt"
    config.write_text(f'name: "custom"{comment_before}\nbackend: "mybackend"\nmax_batch_size: "x"'
                      f"{comment_on_error_line}\n")
    return config


def test_inline_ignore_on_the_findings_line(capsys, example):
    repo, _container = example
    broken_config(repo, "  # customops: ignore[CO101] a typo kept on purpose")
    record = report(capsys, example)
    assert "CO101" not in codes(record) and "CO107" not in codes(record)
    [hidden] = record["suppressed"]
    assert (hidden["code"], hidden["line"]) == ("CO101", 3)
    assert hidden["suppression"] == {"source": "config", "file": "custom/config.pbtxt", "line": 3,
                                     "reason": "a typo kept on purpose"}


def test_inline_ignore_on_another_line_does_not_apply(capsys, example):
    repo, _container = example
    broken_config(repo, comment_before="  # customops: ignore[CO101]")
    record = report(capsys, example)
    assert "CO101" in codes(record) and record["suppressed"] == []
    [unused] = [f for f in record["findings"] if f["code"] == "CO107"]
    assert (unused["file"], unused["line"], unused["column"]) == ("custom/config.pbtxt", 1, 17)  # its `#`
    assert "no CO101 finding points at line 1 of this file" in unused["message"]
    assert unused["evidence"] == ["CO101 findings point at line(s) 3 of this file"]


def test_inline_ignore_lists_several_codes(capsys, example):
    repo, _container = example
    broken_config(repo, "  # customops: ignore[CO104, CO101]")
    record = report(capsys, example)
    assert "CO101" not in codes(record) and record["summary"]["suppressed"] == 1
    [unused] = [f for f in record["findings"] if f["code"] == "CO107"]  # CO104 is not found on that line
    assert "no CO104 finding points at line 3" in unused["message"]


def test_ignore_file_applies_to_every_finding_pointing_at_that_config(capsys, example):
    repo, _container = example
    append_to_config(repo, "tokenizer_ort", "# customops: ignore-file[CO104,CO301] -- ops are baked into the image\n")
    record = report(capsys, example)
    assert not {"CO104", "CO301", "CO107"} & codes(record)
    assert sorted(f["code"] for f in record["suppressed"]) == ["CO104", "CO301"]
    assert {f["suppression"]["reason"] for f in record["suppressed"]} == {"ops are baked into the image"}


def test_same_line_ignore_on_the_op_library_filename_line_suppresses_the_finding_about_that_library(capsys, example):
    repo, _container = example
    config = repo / "tokenizer_ort" / "config.pbtxt"
    config.write_text(config.read_text().replace("}", "}  # customops: ignore[CO104]"))
    record = report(capsys, example)
    assert "CO104" not in codes(record) and "CO107" not in codes(record)
    assert [f["code"] for f in record["suppressed"]] == ["CO104"]


def test_same_line_ignore_of_a_finding_without_a_line_is_CO107_pointing_to_ignore_file(capsys, example):
    repo, _container = example
    append_to_config(repo, "custom", 'model_operations { op_library_filename: "/opt/x.so" }\n'
                     "# customops: ignore[CO105]\n")
    record = report(capsys, example)
    assert "CO105" in codes(record)  # CO105 points at the file, not at a line
    [unused] = [f for f in record["findings"] if f["code"] == "CO107"]
    assert unused["line"] == line_of(repo / "custom" / "config.pbtxt", "customops: ignore")
    assert unused["evidence"] == ["CO105 findings about this file carry no line: "
                                  "`# customops: ignore-file[CO105]` suppresses them"]


def test_a_finding_about_a_library_points_at_the_config_line_naming_it_where_an_ignore_comment_applies(capsys,
                                                                                                      example):
    repo, _container = example
    config = repo / "detector_ort" / "config.pbtxt"
    config.write_text("".join(line + ("  # customops: ignore[CO308]" if "op_library_filename" in line else "") + "\n"
                              for line in config.read_text().splitlines()))
    record = report(capsys, example)
    assert "CO308" not in codes(record) and "CO107" not in codes(record)
    [suppressed] = [f for f in record["suppressed"] if f["code"] == "CO308"]
    assert suppressed["file"] == "detector_ort/config.pbtxt" and suppressed["artifact"] == \
        "detector_ort/ops/libort_noentry.so"


def test_ignore_file_for_a_finding_the_manifest_line_carries_is_CO107_naming_the_manifest(capsys, example):
    repo, _container = example
    append_to_config(repo, "segmenter_trt", "# customops: ignore-file[CO501]\n")
    record = report(capsys, example)
    assert "CO501" in codes(record)  # the plugin is listed in customops.toml, so its finding points there
    [unused] = [f for f in record["findings"] if f["code"] == "CO107"]
    assert unused["model"] == "segmenter_trt" and "customops.toml" in unused["evidence"][0]


def test_malformed_or_unknown_inline_ignore_is_CO107(capsys, example):
    repo, _container = example
    append_to_config(repo, "detector_ort", "# customops: ignore CO308\n# customops: ignore[CO999]\n")
    messages = [f["message"] for f in report(capsys, example, "--load-model", "detector_ort")["findings"]
                if f["code"] == "CO107"]  # certain even when only some models are checked
    assert messages == ["`# customops: ignore CO308` is not `# customops: ignore[CODES]` or "
                        "`# customops: ignore-file[CODES]`: it suppresses nothing",
                        "`# customops: ignore[CO999]` names 'CO999', which is not a customops code"]


def test_a_hash_inside_a_string_starts_no_comment():
    text = ('name: "a # customops: ignore[CO104]"\n'
            "platform: 'it''s # customops: ignore[CO102]'  # customops: ignore[CO101]\n"
            'backend: "x\\" # customops: ignore[CO103]"\n')
    [directive] = parse_directives(text, "/r/m/config.pbtxt")
    assert (directive.line, directive.codes, directive.kind) == (2, ("CO101",), DirectiveKind.LINE)


# -- the code table ------------------------------------------------------------------------------------------


def test_explain_CO107_and_the_sarif_rules_derive_from_the_table(capsys, example):
    assert main(["explain", "CO107"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("CO107: suppression matches no finding (default severity: warning)")
    repo, _container = example
    add_to_manifest(repo, 'ignore = [{ code = "CO402" }]\n')
    _code, out, _err = run(capsys, example, "--format", "sarif")
    rules = {r["id"]: r for r in json.loads(out)["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["CO107"]["name"] == "suppression matches no finding"


def test_explain_names_every_way_to_suppress_a_code():
    from customops.codes import explain

    text = explain("CO104")
    for form in ("--ignore CO104", 'ignore = ["CO104"]', 'reason = "<why>"', "# customops: ignore[CO104]",
                 "ignore-file[CO104]"):
        assert form in text, form


def test_sarif_records_a_suppressed_finding_as_suppressed_and_fingerprints_survive_a_moved_line(capsys, example):
    """Code scanning shows a suppressed result as dismissed (SARIF `suppressions`, with the reason) instead of
    losing it, and tracks every result by `partialFingerprints`, which do not change when lines move."""
    repo, _container = example
    add_to_manifest(repo, '\n[[check.ignore]]\ncode = "CO104"\nreason = "cwd is set"\n')
    _code, out, _err = run(capsys, example, "--format", "sarif")
    results = json.loads(out)["runs"][0]["results"]
    (hidden,) = [r for r in results if r["ruleId"] == "CO104"]
    assert hidden["suppressions"] == [{"kind": "external", "justification": "cwd is set"}]
    assert all("suppressions" not in r for r in results if r["ruleId"] != "CO104")
    before = {r["partialFingerprints"]["customops/v1"] for r in results}
    config = repo / "tokenizer_ort" / "config.pbtxt"
    config.write_text("\n\n# moved down\n" + config.read_text())
    _code, out, _err = run(capsys, example, "--format", "sarif")
    assert {r["partialFingerprints"]["customops/v1"] for r in json.loads(out)["runs"][0]["results"]} == before
