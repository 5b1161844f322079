"""Every SARIF file customops writes passes the SARIF Multitool's GitHub rules: what GitHub's code scanning needs
of an upload (`sarif validate --rule-kind Ghas`, with GitHub's own policy, which turns on GH1001-GH1007).

Each rule is checked here in Python, as microsoft/sarif-sdk's src/Sarif.Multitool.Library/Rules/GH*.cs check
it, on the reports of three runs of the example: as it is, with suppressions, and with a finding that no file
names (CO108). A run that cannot check (exit 2) writes no SARIF file at all (docs/ci.md: code scanning would
take it for an analysis that found nothing). Each Python check is shown to flag the log its rule is about; and
where the real Multitool can be installed (npm, into the oracle cache) it judges the same reports and the same
broken logs.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import customops

SARIF_ID = "sarif-2.1.0"  # GH1011: a $schema naming the final 2.1.0 schema ends so (.json optional)
LIMITS = {"runs": 5, "rules": 1000, "results": 1000, "locations": 10, "codeFlows": 100, "threadFlowLocations": 100}
MULTITOOL = ("@microsoft/sarif-multitool-linux", "5.7.0")  # the npm package's self-contained Linux executable
ORACLES = Path.home() / ".cache" / "customops-oracles"
# microsoft/sarif-sdk policies/github.config.xml: GitHub's policy for `validate` (GH1001-GH1007 are off by default)
GITHUB_POLICY = """<?xml version="1.0" encoding="utf-8"?>
<Properties>
  <Properties Key='SARIF2007.ExpressPathsRelativeToRepoRoot.Options'><Property Key='RuleEnabled' Value='Error' />
  </Properties>
  <Properties Key='SARIF2016.FileUrisShouldBeRelative.Options'><Property Key='RuleEnabled' Value='Disabled' />
  </Properties>
""" + "".join(f"""  <Properties Key='{rule}.Options'><Property Key='RuleEnabled' Value='Error' /></Properties>
""" for rule in ("GH1001.ProvideRequiredLocationProperties", "GH1002.InlineThreadFlowLocations",
                 "GH1003.ProvideRequiredRegionProperties", "GH1004.ReviewArraysThatExceedConfigurableDefaults",
                 "GH1005.LocationsMustBeRelativeUrisOrFilePaths", "GH1006.ProvideCheckoutPath",
                 "GH1007.ProvideFullyFormattedMessageStrings")) + "</Properties>\n"

Check = Callable[[dict], list[str]]
RULES: dict[str, Check] = {}


def rule(rule_id: str) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        RULES[rule_id] = check
        return check
    return register


def results(log: dict) -> Iterator[tuple[str, dict]]:
    for r, run in enumerate(log.get("runs") or []):
        for i, result in enumerate(run.get("results") or []):
            yield f"runs[{r}].results[{i}]", result


def locations(log: dict) -> Iterator[tuple[str, dict]]:
    """Every location of every result: its locations, relatedLocations and code flows' steps."""
    for where, result in results(log):
        for key in ("locations", "relatedLocations"):
            for i, loc in enumerate(result.get(key) or []):
                yield f"{where}.{key}[{i}]", loc
        for step in thread_flow_locations(result):
            if "location" in step:
                yield f"{where}.codeFlows", step["location"]


def thread_flow_locations(result: dict) -> Iterator[dict]:
    for flow in result.get("codeFlows") or []:
        for thread in flow.get("threadFlows") or []:
            yield from thread.get("locations") or []


def uris(log: dict) -> Iterator[tuple[str, str]]:
    for where, loc in locations(log):
        uri = ((loc.get("physicalLocation") or {}).get("artifactLocation") or {}).get("uri")
        if uri is not None:
            yield where, uri


def blank(value: object) -> bool:
    return not isinstance(value, str) or not value.strip()


@rule("GH1001")
def provide_required_location_uris(log: dict) -> list[str]:
    """Each result has a non-empty `locations`, and each of its locations (related ones too) the URI of the
    artifact: code scanning does not show a result without one."""
    found = []
    for where, result in results(log):
        if not result.get("locations"):
            found.append(f"{where}: no locations")
        for key in ("locations", "relatedLocations"):
            for i, loc in enumerate(result.get(key) or []):
                if ((loc.get("physicalLocation") or {}).get("artifactLocation") or {}).get("uri") is None:
                    found.append(f"{where}.{key}[{i}]: no physicalLocation.artifactLocation.uri")
    return found


@rule("GH1002")
def inline_thread_flow_locations(log: dict) -> list[str]:
    """A code flow's steps are written inline, never as an `index` into run.threadFlowLocations."""
    return [f"{where}: threadFlowLocation.index" for where, result in results(log)
            for step in thread_flow_locations(result) if step.get("index", -1) >= 0]


@rule("GH1003")
def provide_required_region_properties(log: dict) -> list[str]:
    """Each location of a result has a region with its startLine: code scanning places an alert on a line."""
    found = []
    for where, result in results(log):
        for i, loc in enumerate(result.get("locations") or []):
            physical = loc.get("physicalLocation")
            if physical is not None and not (physical.get("region") or {}).get("startLine"):
                found.append(f"{where}.locations[{i}]: no region.startLine")
    return found


@rule("GH1004")
def review_arrays_that_exceed_configurable_defaults(log: dict) -> list[str]:
    """Within the numbers of runs, rules, results, locations and code flow steps code scanning shows."""
    runs = log.get("runs") or []
    sizes = [("runs", "runs", len(runs))]
    for r, run in enumerate(runs):
        sizes.append((f"runs[{r}].tool.driver.rules", "rules", len(((run.get("tool") or {}).get("driver") or {})
                                                                  .get("rules") or [])))
        sizes.append((f"runs[{r}].results", "results", len(run.get("results") or [])))
    for where, result in results(log):
        sizes.append((f"{where}.locations", "locations", len(result.get("locations") or [])))
        sizes.append((f"{where}.codeFlows", "codeFlows", len(result.get("codeFlows") or [])))
        for flow in result.get("codeFlows") or []:
            for thread in flow.get("threadFlows") or []:
                sizes.append((f"{where}.codeFlows", "threadFlowLocations", len(thread.get("locations") or [])))
    return [f"{where}: {n} > {LIMITS[kind]}" for where, kind, n in sizes if n > LIMITS[kind]]


@rule("GH1005")
def locations_must_be_relative_uris_or_file_paths(log: dict) -> list[str]:
    """Every location is a file: a relative reference, or an absolute URI of the `file` scheme."""
    return [f"{where}: {uri}" for where, uri in uris(log) if urlsplit(uri).scheme not in ("", "file")]


@rule("GH1006")
def provide_checkout_path(log: dict) -> list[str]:
    """An absolute file location lies below the run's `invocations[].workingDirectory` (GitHub's checkout path),
    else GitHub rejects the file; a relative reference beginning with `/` is taken as one too (it is an absolute
    path on Linux, and SARIF1004 refuses it beside a uriBaseId)."""
    found = []
    for r, run in enumerate(log.get("runs") or []):
        roots = [(i.get("workingDirectory") or {}).get("uri", "").rstrip("/") + "/" for i in run.get("invocations")
                 or [] if (i.get("workingDirectory") or {}).get("uri")]
        for where, uri in uris({"runs": [run]}):
            absolute = uri if urlsplit(uri).scheme == "file" else "file://" + uri if uri.startswith("/") else None
            if absolute is not None and not any(absolute.startswith(root) for root in roots):
                found.append(f"runs[{r}]: {where.split('.', 1)[1]}: {uri}")
    return found


@rule("GH1007")
def provide_fully_formatted_message_strings(log: dict) -> list[str]:
    """Each result's message is its `text`: code scanning does not format message arguments."""
    return [f"{where}: no message.text" for where, result in results(log)
            if not (result.get("message") or {}).get("text")]


@rule("GH1011")
def reference_final_schema(log: dict) -> list[str]:
    schema = log.get("$schema")
    return [] if schema is None or schema.removesuffix(".json").endswith(SARIF_ID) else [f"$schema: {schema}"]


@rule("GH1013")
def provide_required_sarif_log_properties(log: dict) -> list[str]:
    """runs, a $schema, version 2.1.0, and at most 20 runs."""
    if log.get("runs") is None:
        return ["no runs"]
    return [problem for problem, bad in (("no $schema", "$schema" not in log),
                                         (f"version {log.get('version')}", log.get("version") != "2.1.0"),
                                         ("more than 20 runs", len(log["runs"]) > 20)) if bad]


@rule("GH1014")
def provide_required_run_properties(log: dict) -> list[str]:
    """Each run has its tool and a `results` array (empty when nothing was found: never absent)."""
    return [f"runs[{r}]: no {key}" for r, run in enumerate(log.get("runs") or []) for key in ("results", "tool")
            if run.get(key) is None]


@rule("GH1015")
def provide_required_result_properties(log: dict) -> list[str]:
    """Each result has a message with text and a non-empty `locations`."""
    found = []
    for where, result in results(log):
        if blank((result.get("message") or {}).get("text")):
            found.append(f"{where}: no message.text")
        if not result.get("locations"):
            found.append(f"{where}: no locations")
    return found


@rule("GH1016")
def provide_required_physical_location(log: dict) -> list[str]:
    return [f"{where}: no physicalLocation" for where, loc in locations(log) if loc.get("physicalLocation") is None]


@rule("GH1017")
def provide_required_physical_location_properties(log: dict) -> list[str]:
    """Each physicalLocation has an artifactLocation with its uri; a region, where there is one, says where it
    starts and does not end before it."""
    found = []
    for where, loc in locations(log):
        physical = loc.get("physicalLocation")
        if physical is None:
            continue
        if (physical.get("artifactLocation") or {}).get("uri") is None:
            found.append(f"{where}: no artifactLocation.uri")
        region = physical.get("region")
        if region is not None:
            start, end = region.get("startLine"), region.get("endLine")
            if start is None and "charOffset" not in region and "byteOffset" not in region:
                found.append(f"{where}: a region without startLine, charOffset or byteOffset")
            if start is not None and end is not None and end < start:
                found.append(f"{where}: endLine before startLine")
            if (start is not None and end in (None, start) and "endColumn" in region
                    and region["endColumn"] < region.get("startColumn", 1)):
                found.append(f"{where}: endColumn before startColumn")
    return found


@rule("GH1018")
def provide_required_tool_properties(log: dict) -> list[str]:
    found = []
    for r, run in enumerate(log.get("runs") or []):
        driver = (run.get("tool") or {}).get("driver")
        if driver is None:
            found.append(f"runs[{r}]: no tool.driver")
            continue
        if blank(driver.get("name")):
            found.append(f"runs[{r}]: no driver.name")
        if driver.get("rules") is None:
            found.append(f"runs[{r}]: no driver.rules")
    return found


@rule("GH2012")
def provide_required_reporting_descriptor_properties(log: dict) -> list[str]:
    """Each rule has an id, a shortDescription, a fullDescription and help text: code scanning shows them with
    every alert of the rule."""
    found = []
    for r, run in enumerate(log.get("runs") or []):
        for i, descriptor in enumerate(((run.get("tool") or {}).get("driver") or {}).get("rules") or []):
            for key, value in (("id", descriptor.get("id")),
                               ("shortDescription", (descriptor.get("shortDescription") or {}).get("text")),
                               ("fullDescription", (descriptor.get("fullDescription") or {}).get("text")),
                               ("help", (descriptor.get("help") or {}).get("text"))):
                if blank(value):
                    found.append(f"runs[{r}].tool.driver.rules[{i}]: no {key}")
    return found


def broken(rule_id: str, log: dict) -> dict:
    """`log` (a valid one with rules, results and related locations) changed so that `rule_id` fails."""
    log = copy.deepcopy(log)
    run = log["runs"][0]
    result = next(r for r in run["results"] if "relatedLocations" in r)
    physical = result["locations"][0]["physicalLocation"]
    if rule_id == "GH1001":
        del result["locations"]
    elif rule_id == "GH1002":
        run["threadFlowLocations"] = [{"location": result["locations"][0]}]
        result["codeFlows"] = [{"threadFlows": [{"locations": [{"index": 0}]}]}]
    elif rule_id == "GH1003":
        del physical["region"]
    elif rule_id == "GH1004":
        result["locations"] *= LIMITS["locations"] + 1
    elif rule_id == "GH1005":
        physical["artifactLocation"] = {"uri": "https://example.com/config.pbtxt"}
    elif rule_id == "GH1006":
        physical["artifactLocation"] = {"uri": "file:///elsewhere/config.pbtxt"}
    elif rule_id in ("GH1007", "GH1015"):
        result["message"] = {"text": ""}
    elif rule_id == "GH1011":
        log["$schema"] = "https://schemastore.azurewebsites.net/schemas/json/sarif-2.1.0-rtm.4.json"
    elif rule_id == "GH1013":
        del log["$schema"]
    elif rule_id == "GH1014":
        del run["results"]
    elif rule_id == "GH1016":
        result["locations"] = [{"message": {"text": "somewhere"}}]
    elif rule_id == "GH1017":
        physical["artifactLocation"] = {"uriBaseId": "%SRCROOT%"}
    elif rule_id == "GH1018":
        del run["tool"]["driver"]["rules"]
    elif rule_id == "GH2012":
        del run["tool"]["driver"]["rules"][0]["fullDescription"]
    return log


def customops_check(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "customops", "check", *args], capture_output=True, text=True,
                          env={**os.environ, "CUSTOMOPS_CACHE_DIR": str(cache)})


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """The SARIF of three runs of the example in a git checkout: as it is; with a manifest suppression and a
    config comment suppression; and asked for a model no repository has (CO108, a finding no file names)."""
    from fixtures.example import install

    root = Path(__file__).resolve().parent.parent
    logs = {}
    for name in ("example", "suppressed", "unnamed"):
        top = tmp_path_factory.mktemp(name)
        repo = top / "model_repository"
        shutil.copytree(root / "examples" / "model_repository", repo, ignore=shutil.ignore_patterns("*.so"))
        container = install(repo)
        subprocess.run(["git", "init", "-q", str(top)], check=True)
        extra: tuple[str, ...] = ()
        if name == "suppressed":
            manifest = repo / "customops.toml"
            manifest.write_text(manifest.read_text()
                                + 'ignore = [{ code = "CO401", reason = "interposes on purpose" }]\n')
            config = repo / "tokenizer_ort" / "config.pbtxt"
            config.write_text("# customops: ignore-file[CO104] -- the server runs in the model directory\n"
                              + config.read_text())
        elif name == "unnamed":
            extra = ("--load-model", "text_tf", "--load-model", "no_such_model")
        sarif = top / "customops.sarif"
        customops_check(str(repo), "--container-root", str(container), "--no-cache", "--sarif", str(sarif), *extra,
                        cache=top / "cache")
        logs[name] = json.loads(sarif.read_text())
    assert any("suppressions" in r for r in logs["suppressed"]["runs"][0]["results"])
    assert any(r["ruleId"] == "CO108" for r in logs["unnamed"]["runs"][0]["results"])
    return logs


@pytest.mark.parametrize("report", ["example", "suppressed", "unnamed"])
@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_every_sarif_customops_writes_passes_the_github_rule(reports, rule_id, report):
    assert RULES[rule_id](reports[report]) == []


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_the_check_of_each_github_rule_flags_a_log_that_breaks_it(reports, rule_id):
    assert RULES[rule_id](broken(rule_id, reports["example"]))


@pytest.mark.parametrize("report", ["example", "suppressed", "unnamed"])
def test_every_sarif_names_the_customops_version_as_its_semantic_version(reports, report):
    """GitHub reads `semanticVersion` (in preference to `version`) to tell a new tool's results from new code's."""
    driver = reports[report]["runs"][0]["tool"]["driver"]
    assert driver["semanticVersion"] == driver["version"] == customops.__version__


def test_a_run_that_cannot_check_writes_no_sarif_for_code_scanning_to_take_as_complete(tmp_path):
    sarif = tmp_path / "customops.sarif"
    result = customops_check(str(tmp_path / "missing"), "--triton-release", "25.03", "--sarif", str(sarif),
                             cache=tmp_path / "cache")
    assert result.returncode == 2 and not sarif.exists()


def multitool() -> Path:
    """The SARIF Multitool's Linux executable, installed once with npm into the oracle cache (the package's
    only install script makes it executable: done here); skips when it cannot be installed."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip(f"{MULTITOOL[0]} ships an x86-64 Linux executable only")
    home = ORACLES / f"sarif-multitool-{MULTITOOL[1]}"
    binary = home / "node_modules" / "@microsoft" / "sarif-multitool-linux" / "Sarif.Multitool"
    ORACLES.mkdir(parents=True, exist_ok=True)
    with open(ORACLES / "sarif-multitool.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist: one worker installs
        if not binary.exists():
            npm = shutil.which("npm")
            if npm is None:
                pytest.skip("npm is not installed: the SARIF Multitool is installed with it")
            partial = home.with_name(home.name + ".part")
            shutil.rmtree(partial, ignore_errors=True)
            try:
                proc = subprocess.run([npm, "install", "--prefix", str(partial), "--no-audit", "--no-fund",
                                       "--ignore-scripts", "@".join(MULTITOOL)], capture_output=True, text=True,
                                      timeout=600)
            except subprocess.TimeoutExpired:
                pytest.skip(f"npm install {'@'.join(MULTITOOL)}: no answer in 10 minutes")
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
                pytest.skip(f"npm install {'@'.join(MULTITOOL)}: {last}")
            partial.rename(home)
        binary.chmod(0o755)
    return binary


def validate(logs: dict[str, dict], tmp_path: Path) -> dict[str, set[str]]:
    """The Multitool's `validate` with GitHub's policy, SARIF and GitHub rules, on the logs (one run): for each,
    the ids of the rules that report an error or a warning about it, and of the tool's own errors."""
    tool = multitool()
    (tmp_path / "github.config.xml").write_text(GITHUB_POLICY)
    for name, log in logs.items():
        (tmp_path / f"{name}.sarif").write_text(json.dumps(log))
    out = tmp_path / "validation.sarif"
    out.unlink(missing_ok=True)
    proc = subprocess.run([str(tool), "validate", "--rule-kind", "Sarif;Ghas", "--config",
                           str(tmp_path / "github.config.xml"), "-o", str(out),
                           *(str(tmp_path / f"{name}.sarif") for name in logs)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DOTNET_CLI_TELEMETRY_OPTOUT": "1"})
    assert out.exists(), proc.stdout + proc.stderr
    (run,) = json.loads(out.read_text())["runs"]
    notifications = [n for i in run.get("invocations", []) for n in i.get("toolExecutionNotifications", [])]
    found: dict[str, set[str]] = {name: set() for name in logs}
    for entry, rule_id in [*((r, r["ruleId"]) for r in run["results"]),
                           *((n, n["descriptor"]["id"]) for n in notifications if "locations" in n)]:
        if entry.get("level", "warning") in ("error", "warning"):
            uri = entry["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            found[Path(urlsplit(uri).path).stem].add(rule_id)
    return found


def test_the_sarif_multitool_with_github_rules_finds_nothing_in_any_sarif_customops_writes(reports, tmp_path):
    assert validate(reports, tmp_path) == {name: set() for name in reports}


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_the_sarif_multitool_flags_the_log_broken_for_a_rule_as_its_python_check_does(reports, tmp_path, rule_id):
    """The Python checks judge as the real validator does: the log broken for one rule is reported by it
    under that rule's id. GH1016 and GH1017 it cannot name: formatting their messages, Multitool 5.7.0 stops
    with an unhandled FormatException (it does not pass the log either)."""
    (found,) = validate({rule_id: broken(rule_id, reports["example"])}, tmp_path).values()
    crash = "ERR999.UnhandledEngineException"
    assert (rule_id in found) if rule_id not in ("GH1016", "GH1017") else (crash in found and rule_id not in found)
