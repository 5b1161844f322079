"""customops.toml: the custom libraries a repository needs and how to load them, strictly validated.

    [tensorrt]
    plugins = ["plugins/libmy_plugins.so"]
    load = "backend-config"          # or "preload"
    [pytorch]
    ops = ["ops/libmy_torch_ops.so"]
    [tensorflow]
    preload = ["ops/libmy_tf_ops.so"]
    [host]
    preload = []
    [check]
    fail-on = "error"                # or "warning", "info"
    select = ["CO3", "CO401"]        # report only these codes or prefixes (default: all)
    ignore = [
        "CO404",                     # a code or prefix: never reported (as ruff's ignore)
        { code = "CO402", library = "plugins/*.so", symbol = "deflate*", reason = "vendored zlib" },
    ]                                # a table: matching findings are suppressed (counted, listed with -v)
    profile = "customops-profile.json"  # what CI checks against when no container is at hand

Relative paths are relative to the manifest. An unknown key, a wrong type or a bad value is an error
(CO106, exit 2): customops never guesses what a manifest meant.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, replace

from customops import ownership, safeio
from customops.codes import CODES as CODE_TABLE
from customops.codes import Code, Severity
from customops.comments import uncommented
from customops.emitters import emits
from customops.errors import InputError, printable
from customops.frameworks import MANIFEST_ORDER, Framework
from customops.selection import parse_selectors

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MANIFEST_NAME = "customops.toml"
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # control characters (Unicode category Cc)


@dataclass(frozen=True)
class Ignore:
    code: str
    library: str | None = None  # glob on the library path (relative to the manifest, or absolute)
    symbol: str | None = None  # glob on the raw or demangled symbol name
    reason: str | None = None  # why it is suppressed, shown with the suppressed finding
    line: int | None = None  # where the entry is in the manifest (its unused-suppression CO107 points there)
    column: int | None = None


@dataclass(frozen=True)
class Manifest:
    path: str | None
    libraries: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (a framework's entry "[pytorch] ops", its paths)
    loads: tuple[tuple[str, str], ...] = ()  # (table, its `load`) of a framework with a --backend-config setting
    host_preload: tuple[str, ...] = ()
    fail_on: Severity = Severity.ERROR
    ignore: tuple[Ignore, ...] = ()  # the tables of [check] ignore: suppressions
    select: tuple[str, ...] | None = None  # codes and prefixes reported (None: all); --select replaces it
    ignore_codes: tuple[str, ...] = ()  # the strings of [check] ignore: codes and prefixes never reported
    profile: str | None = None  # the container profile CI checks against (customops profile create)
    written: tuple[tuple[str, str, str], ...] = ()  # (entry as "[host] preload", path as resolved, as written)

    @property
    def directory(self) -> str | None:
        return os.path.dirname(self.path) if self.path else None

    def listed(self, framework: Framework) -> tuple[str, ...]:
        """The libraries the framework's entry lists, as resolved (none where it has no entry)."""
        entry = framework.manifest.entry if framework.manifest else None
        return next((paths for key, paths in self.libraries if key == entry), ())

    def load(self, framework: Framework) -> str:
        """How the libraries of a framework with a --backend-config setting reach it: "backend-config" (that
        setting, the default) or "preload"."""
        table = framework.manifest.table if framework.manifest else None
        return next((load for key, load in self.loads if key == table), "backend-config")

    def as_written(self, key: str, path: str) -> str:
        """The value of the `key` entry ("[pytorch] ops") that resolved to `path`, as the manifest wrote it."""
        return next((w for k, p, w in self.written if k == key and p == path), path)


SCHEMA: dict[str, dict[str, type]] = {  # a framework's table: its entry, and `load` where it has a setting
    **{f.manifest.table: {f.manifest.key: list, **({"load": str} if f.plugins else {})}
       for f in MANIFEST_ORDER if f.manifest},
    "host": {"preload": list},
    "check": {"fail-on": str, "select": list, "ignore": list, "profile": str},
}


def load_manifest(path: str | None) -> Manifest:
    if path is None:
        return Manifest(None)
    text, data = _read(path)
    return _Reader(path, data).manifest(text)


def _read(path: str) -> tuple[str, dict]:
    """The manifest's text and its TOML tables; any problem is one InputError naming the file."""
    try:
        text = safeio.read_bytes(path, safeio.MANIFEST_LIMIT).decode("utf-8")
        return text, tomllib.loads(text)
    except InputError as exc:
        raise InputError(path, "manifest not found" if exc.reason == "No such file or directory" else exc.reason
                         ) from None
    except RecursionError:
        raise invalid_manifest(path, "nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        raise invalid_manifest(path, f"not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # found by fuzzing: tomllib decodes the whole file as UTF-8 first
        raise invalid_manifest(path, f"not UTF-8 text (byte {exc.start})") from None


@emits(Code.CO106)
def invalid_manifest(path: str, reason: str) -> InputError:
    """A manifest customops cannot act on: reported as an InputError (exit status 2) naming the file, not as a
    finding, since what it should load is unknown."""
    return InputError(path, f"{Code.CO106} {reason}")


class _Reader:
    """One manifest's tables checked against SCHEMA and turned into a Manifest; every problem is CO106,
    naming the file. Relative paths are resolved against the manifest's directory and may not leave it."""

    def __init__(self, path: str, data: dict) -> None:
        self.path, self.data = path, data
        self.base = os.path.dirname(os.path.abspath(path))
        self.check = data.get("check", {})
        self.written: list[tuple[str, str, str]] = []  # what paths() read, as written (Manifest.written)

    def fail(self, reason: str) -> InputError:
        return invalid_manifest(self.path, reason)

    def plain(self, where: str, value: str) -> str:
        """A path or glob customops acts on: a control character in one (a newline that would end a line of
        `customops env`, an escape sequence for a terminal) is refused, never passed on."""
        if CONTROL.search(value):
            raise self.fail(f"{where}: '{printable(value)}' contains a control character")
        return value

    def check_shape(self) -> None:
        for section, value in self.data.items():
            if section not in SCHEMA:
                raise self.fail(f"unknown section [{section}] (known: {', '.join(SCHEMA)})")
            if not isinstance(value, dict):
                raise self.fail(f"[{section}] must be a table")
            for key, item in value.items():
                if key not in SCHEMA[section]:
                    raise self.fail(f"unknown key {key!r} in [{section}] (known: {', '.join(SCHEMA[section])})")
                if not isinstance(item, SCHEMA[section][key]):
                    raise self.fail(f"[{section}] {key} must be a {SCHEMA[section][key].__name__}")

    def paths(self, section: str, key: str) -> tuple[str, ...]:
        values = self.data.get(section, {}).get(key, [])
        if not all(isinstance(v, str) and v for v in values):
            raise self.fail(f"[{section}] {key} must be a list of non-empty paths")
        resolved = []
        for value in values:
            self.plain(f"[{section}] {key}", value)
            path = os.path.normpath(os.path.join(self.base, value))
            if not os.path.isabs(value) and not path.startswith(self.base.rstrip("/") + "/"):
                raise self.fail(f"[{section}] {key}: {value!r} escapes the repository (give an absolute path if "
                                "meant)")
            resolved.append(path)
            self.written.append((f"[{section}] {key}", path, value))
        return tuple(resolved)

    def selectors(self, key: str, values: list) -> tuple[str, ...]:
        if not all(isinstance(v, str) for v in values):
            raise self.fail(f"[check] {key}: codes and prefixes are strings")
        try:
            return parse_selectors([self.plain(f"[check] {key}", v) for v in values], f"[check] {key}")
        except ValueError as exc:
            raise self.fail(str(exc)) from None

    def ignores(self, text: str) -> tuple[tuple[Ignore, ...], tuple[str, ...]]:
        """The tables of [check] ignore (each with the line it is written on) and its code strings."""
        tables: list[Ignore] = []
        codes: list[str] = []
        for entry in self.check.get("ignore", []):
            if isinstance(entry, str):
                codes += self.selectors("ignore", [entry])
                continue
            if not isinstance(entry, dict) or set(entry) - {"code", "library", "symbol", "reason"} or (
                    "code" not in entry):
                raise self.fail("[check] ignore entries are codes (or prefixes), or tables with code and optionally "
                                "library, symbol and reason")
            if entry["code"] not in CODE_TABLE:
                raise self.fail(f"[check] ignore: unknown code {entry['code']!r}")
            if not all(isinstance(entry.get(k, ""), str) for k in ("library", "symbol", "reason")):
                raise self.fail("[check] ignore: library and symbol are strings (globs), reason a string")
            library, symbol = (self.plain(f"[check] ignore {k}", entry[k]) if k in entry else None
                               for k in ("library", "symbol"))
            if library is not None and not os.path.isabs(library):
                library = os.path.normpath(os.path.join(self.base, library))
            tables.append(Ignore(entry["code"], library, symbol, entry.get("reason") or None))
        places = entry_lines(text, [i.code for i in tables])
        located = tuple(replace(i, line=line, column=column) for i, (line, column) in zip(tables, places, strict=True))
        return located, tuple(codes)

    def manifest(self, text: str) -> Manifest:
        self.check_shape()
        loads = tuple((f.manifest.table, self.data.get(f.manifest.table, {}).get("load", "backend-config"))
                      for f in MANIFEST_ORDER if f.manifest and f.plugins)
        for table, load in loads:
            if load not in ("backend-config", "preload"):
                raise self.fail(f"[{table}] load must be \"backend-config\" or \"preload\", not {load!r}")
        try:
            fail_on = Severity.parse(self.check.get("fail-on", "error"))
        except ValueError as exc:
            raise self.fail(f"[check] fail-on: {exc}") from None
        select = self.selectors("select", self.check["select"]) if "select" in self.check else None
        ignores, ignore_codes = self.ignores(text)
        profile = self.check.get("profile")
        return Manifest(
            path=os.path.abspath(self.path),
            libraries=tuple((f.manifest.entry, self.paths(f.manifest.table, f.manifest.key))
                            for f in MANIFEST_ORDER if f.manifest),
            loads=loads,
            host_preload=self.paths("host", "preload"),
            written=tuple(self.written),
            fail_on=fail_on,
            ignore=ignores,
            select=select,
            ignore_codes=ignore_codes,
            profile=os.path.normpath(os.path.join(self.base, self.plain("[check] profile", profile)))
            if profile is not None else None,
        )


def checkout_root(repository: str) -> str:
    """The nearest directory at or above `repository` holding `.git` (the checkout), else the repository
    itself: discovery never looks above it."""
    start = directory = os.path.abspath(repository)
    while True:
        if os.path.lexists(os.path.join(directory, ".git")):  # one someone else planted bounds nothing
            return start if ownership.ignored(os.path.join(directory, ".git"), "the checkout") else directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return start
        directory = parent


def discover(repositories: list[str], name: str, what: str, option: str) -> str | None:
    """The file `name` nearest to the first repository that has one, looking in the repository and each
    directory above it up to its checkout root (checkout_root). One that is a symbolic link out of that
    checkout is refused (its contents would reach the report): InputError. One that someone else may have
    put there is passed over with a warning (customops.ownership), and so is everything above it."""
    for repo in repositories:
        top = checkout_root(repo)
        directory = os.path.abspath(repo)
        while True:
            candidate = os.path.join(directory, name)
            if os.path.lexists(candidate):  # whatever it is: a FIFO or a directory there is reported, not skipped
                real, base = os.path.realpath(candidate), os.path.realpath(top)
                if not real.startswith(base.rstrip("/") + "/"):
                    raise InputError(candidate, f"a symbolic link out of the model repository or its checkout "
                                     f"(to {printable(real)}), not followed (pass {option} to use {what} kept "
                                     "elsewhere)")
                if ownership.ignored(candidate, what):
                    break
                return candidate
            if directory == top or os.path.dirname(directory) == directory:
                break
            directory = os.path.dirname(directory)
    return None


def find_manifest(repositories: list[str]) -> str | None:
    """customops.toml of the first repository that has one: in the repository or a directory above it, up
    to its checkout's root."""
    return discover(repositories, MANIFEST_NAME, "a manifest", "--manifest")


TOML_CODE = re.compile(r"""(?:^|[\s{,])(?P<key>["']?code["']?)\s*=\s*(?:"(?P<double>[^"]*)"|'(?P<single>[^']*)')""")


def manifest_code_lines(text: str) -> list[tuple[str, int, int]]:
    """(code, line, column) of every `code = "..."` key in the manifest's text, in order: tomllib gives no
    lines, and only [check] ignore tables have a `code` key (the manifest's keys are strict)."""
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        before, _comment = uncommented(line, literal="'")
        found += [(m["double"] if m["double"] is not None else m["single"], number, m.start("key") + 1)
                  for m in TOML_CODE.finditer(before)]
    return found


def entry_lines(text: str, codes: list[str]) -> list[tuple[int | None, int | None]]:
    """The (line, column) of each ignore table (given by its code, in the manifest's order): the n-th table
    with a code is where the n-th `code = "..."` naming it is."""
    by_code: dict[str, list[tuple[int, int]]] = {}
    for code, line, column in manifest_code_lines(text):
        by_code.setdefault(code, []).append((line, column))
    seen: dict[str, int] = {}
    places: list[tuple[int | None, int | None]] = []
    for code in codes:
        n = seen[code] = seen.get(code, -1) + 1
        places.append(by_code[code][n] if n < len(by_code.get(code, ())) else (None, None))
    return places
