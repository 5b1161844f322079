"""The model repository as Triton core reads it: configs, backend resolution, version directories.

Rules of Triton core (`src/model_config_utils.cc` AutoCompleteBackendFields and
ValidateModelConfig, `model_lifecycle.cc` VersionsToLoad, `model_repository_manager.cc`
GetModelConfigFullPath). A model's problems are findings (CO101-CO103, each code's emitter here), with
Triton's own text in `predicted` (the model's paths as this machine sees them: app/planning says them as the
server does).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field
from typing import Any

from customops import safeio
from customops.codes import Code
from customops.emitters import emits
from customops.errors import InputError, printable
from customops.findings import Finding
from customops.memo import once
from customops.triton.autocomplete import served
from customops.triton.config_checks import first_problem
from customops.triton.modelconfig import parse_config
from customops.triton.release_rules import TODAY, RepositoryRules

# VersionsToLoad (core model_lifecycle.cc): these subdirectories are never versions (kWarmupDataFolder,
# kInitialStateFolder, kModelConfigFolder); any other is converted with std::stoll, unless it has a leading zero
NOT_VERSIONS = ("warmup", "initial_state", "configs")
STOLL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")  # what std::stoll reads: the rest of the name is ignored
INT64 = range(-(2 ** 63), 2 ** 63)


@dataclass(frozen=True)
class Where:
    """Whose problem it is and what its finding points at: the model's config file (at line 1 unless a line
    is known), else its directory."""

    model: str
    directory: str
    config_path: str | None

    def finding(self, code: Code, message: str, predicted: str, line: int | None, column: int | None,
                hint: str) -> Finding:
        return Finding(code, message, model=self.model, file=self.config_path or self.directory,
                       line=(line or 1) if self.config_path else None, column=column, predicted=predicted or None,
                       hint=hint)


@emits(Code.CO101)
def invalid_config(where: Where, message: str, predicted: str = "", line: int | None = None,
                   column: int | None = None, hint: str = "") -> Finding:
    """A configuration the core cannot read or parse, or refuses (a name other than its directory's,
    ValidateModelConfig's checks, none with auto-complete disabled). `hint`: a fix for this case, where the
    code's own does not apply."""
    return where.finding(Code.CO101, message, predicted, line, column, hint)


@emits(Code.CO102)
def unknown_backend(where: Where, message: str, predicted: str = "", hint: str = "") -> Finding:
    """A model whose backend AutoCompleteBackendFields cannot determine, or whose platform and backend disagree."""
    return where.finding(Code.CO102, message, predicted, None, None, hint)


@emits(Code.CO103)
def no_version(where: Where, message: str, predicted: str = "") -> Finding:
    """A model with no version directory its version policy loads (VersionsToLoad), or one std::stoll throws on."""
    return where.finding(Code.CO103, message, predicted, None, None, "")


@dataclass(frozen=True)
class Model:
    name: str
    path: str  # host path of the model directory
    config_path: str | None  # host path of the config file that was read
    config: Any = field(repr=False, compare=False)
    backend: str  # "" when it cannot be determined
    platform: str
    runtime: str
    versions: tuple[int, ...]  # the ones loaded under the version policy, newest first
    op_libraries: tuple[str, ...]  # model_operations.op_library_filename, as written
    problems: tuple[Finding, ...]  # CO101-CO103: the model is not loaded
    default_model_filename: str = ""  # as the core auto-completes it ("" : the backend's own default)

    @property
    def loadable(self) -> bool:
        return not self.problems

    def model_file(self, default: str) -> str:
        """The file or directory the backend loads: default_model_filename, else the backend's `default`,
        in the first version directory (the model must have one)."""
        return os.path.join(self.path, str(self.versions[0]), self.default_model_filename or default)


def check_repository(path: str) -> None:
    """A model repository is a directory of model directories: one that does not exist, is not a directory,
    or is itself a model directory (it has a config.pbtxt, and its version directories would be read as
    models called "1", "2") is an InputError."""
    if not os.path.isdir(path):
        raise InputError(path, "model repository is not a directory" if os.path.exists(path) else
                         "model repository does not exist")
    if os.path.isfile(os.path.join(path, "config.pbtxt")):
        raise InputError(path, "is a model directory; pass its repository (the parent directory)")


def read_repository(path: str, config_name: str | None = None, only: set[str] | None = None,
                    auto_complete: bool = True, rules: RepositoryRules = TODAY) -> list[Model]:
    """`auto_complete`: False as with tritonserver --disable-auto-complete-config (a config file is required);
    `rules`: those of the container's release."""
    key = ("repository", path, config_name, frozenset(only) if only is not None else None, auto_complete, rules)
    return list(once(key, lambda: tuple(_read_repository(path, config_name, only, auto_complete, rules))))


def _read_repository(path: str, config_name: str | None, only: set[str] | None, auto_complete: bool,
                     rules: RepositoryRules) -> list[Model]:
    check_repository(path)
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise InputError(path, exc.strerror or str(exc)) from None
    models = []
    for name in entries:
        model_dir = os.path.join(path, name)
        # every subdirectory is a model to the core, a hidden one (.ipynb_checkpoints, .git) too
        if not os.path.isdir(model_dir) or (only is not None and name not in only):
            continue
        models.append(read_model(model_dir, name, config_name, auto_complete, rules))
    return models


def read_inside(path: str, model_dir: str, limit: int) -> bytes:
    """A model's file, if it is a regular file whose symlinks stay inside the model repository: one leaving
    it (`config.pbtxt -> /etc/shadow`) resolves inside the container, where the repository is mounted on its
    own, not on this machine, so it is never followed here."""
    return once(("file", path, model_dir, limit), lambda: _read_inside(path, model_dir, limit))


def _read_inside(path: str, model_dir: str, limit: int) -> bytes:
    real, base = os.path.realpath(path), os.path.realpath(os.path.dirname(os.path.abspath(model_dir)))
    if not real.startswith(base.rstrip("/") + "/"):
        raise InputError(path, f"a symbolic link out of the model repository (to {printable(real)}); the server "
                         "resolves it inside the container")
    return safeio.read_bytes(path, limit)


def _broken_link(path: str) -> str:
    """Why a config.pbtxt that is a symbolic link resolves to nothing: a loop, or a target that is missing."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop: the server sees no configuration"
    return (f"is a symbolic link to {printable(os.readlink(path))}, which does not exist: the server sees no "
            "configuration")


def _config_of(name: str) -> str:
    """The subject of a CO101 about the configuration file: the finding points at the file, its message names
    the model (a report that lists messages alone, or a model directory holding no readable file, says whose)."""
    return f"the configuration of model '{name}'"


def read_model(model_dir: str, name: str, config_name: str | None = None, auto_complete: bool = True,
               rules: RepositoryRules = TODAY) -> Model:
    problems: list[Finding] = []
    candidate = os.path.join(model_dir, "config.pbtxt")
    if config_name and os.path.isfile(os.path.join(model_dir, "configs", f"{config_name}.pbtxt")):
        candidate = os.path.join(model_dir, "configs", f"{config_name}.pbtxt")
    config = None
    config_path = candidate if os.path.lexists(candidate) else None  # a dangling link or a loop: CO101, read as such
    where = Where(name, model_dir, config_path)  # what its problems point at
    if config_path is not None and not os.path.exists(config_path):
        hint = "Point the link at the model's configuration, or replace it with the file."
        problems.append(invalid_config(where, f"{_config_of(name)} {_broken_link(config_path)}", hint=hint))
    elif config_path is not None:
        text: str | None
        try:
            text = read_inside(config_path, model_dir, safeio.CONFIG_LIMIT).decode("utf-8")
            if text.startswith("\ufeff"):  # protobuf's text parser, as the core calls it, takes no byte-order mark
                problems.append(invalid_config(where, f"{_config_of(name)} starts with a UTF-8 byte-order mark, "
                                               "which protobuf's text parser rejects",
                                               f"failed to read text proto from {config_path}", 1, 1,
                                               hint="Save config.pbtxt as UTF-8 without a byte-order mark."))
                text = None
        except (InputError, UnicodeDecodeError) as exc:
            reason = exc.reason if isinstance(exc, InputError) else str(exc)
            problems.append(invalid_config(where, f"{_config_of(name)} cannot be read ({reason})",  # at the path
                                           f"failed to read text proto from {config_path}"))
            text = None
        if text is not None:
            config, error = parse_config(text, config_path)
            if error is not None:
                problems.append(invalid_config(where, f"{_config_of(name)} does not parse: {error.reason}",
                                               f"failed to read text proto from {config_path}", error.line,
                                               error.column))
    if config_path is None and not auto_complete:  # model_repository_manager.cc: ReadTextProto of a missing file
        problems.append(invalid_config(where, f"model '{name}' has no config.pbtxt in its directory {model_dir}, "
                                       "which the server requires with auto-complete disabled "
                                       "(--disable-auto-complete-config or --strict-model-config)",
                                       f"failed to open text file for read {candidate}: No such file or directory",
                                       hint="Write the model's config.pbtxt, or let the server auto-complete it."))
    if config is not None and config.name and config.name != name:  # model_repository_manager.cc
        message = f"unexpected directory name '{name}' for model '{config.name}', directory name must equal model name"
        hint = f"Name the directory '{config.name}', or set name: \"{name}\" (or leave name out)."
        problems.append(invalid_config(where, message, message, hint=hint))
    backend = config.backend if config is not None else ""
    platform = config.platform if config is not None else ""
    runtime = config.runtime if config is not None and rules.runtime_field else ""  # read from 24.01 on
    versions = _versions(where, config, problems)
    filename = config.default_model_filename if config is not None else ""
    if config is not None or (config_path is None and auto_complete):
        completed = served(model_dir, name, backend, platform, filename, config.name if config is not None else "",
                           rules)
        backend, platform, filename = completed.backend, completed.platform, completed.default_model_filename
        if completed.problem:
            message = completed.problem + (f"; {completed.suggestion}" if completed.suggestion else "")
            problems.append(unknown_backend(where, message, completed.problem, hint=completed.hint))
        elif config is not None and (invalid := first_problem(config, config.name or name, backend)):
            problems.append(invalid_config(where, invalid, invalid))
    ops = tuple(config.model_operations.op_library_filename) if config is not None else ()
    return Model(name, model_dir, config_path, config, backend, platform, runtime, versions, ops, tuple(problems),
                 filename)


def version_of(directory: str) -> int | None:
    """The version a subdirectory of a model stands for, as VersionsToLoad reads it: `1abc` and `+1` are
    version 1, `-1` is -1, `01` and `abc` are none. A number beyond int64 is std::out_of_range, which the core
    does not catch: ValueError."""
    if directory in NOT_VERSIONS or (len(directory) > 1 and directory[0] == "0"):
        return None
    match = STOLL.match(directory)
    if match is None:
        return None
    value = int(match.group(1))
    if value not in INT64:
        raise ValueError(directory)
    return value


def _versions(where: Where, config: Any, problems: list[Finding]) -> tuple[int, ...]:
    """VersionsToLoad: the versions of the model's subdirectories; the version policy picks among them (no
    policy: the latest one)."""
    available: set[int] = set()
    try:
        subdirs = sorted(d for d in os.listdir(where.directory) if os.path.isdir(os.path.join(where.directory, d)))
    except OSError:
        subdirs = []
    for directory in subdirs:
        try:
            version = version_of(directory)
        except ValueError:
            message = (f"version directory '{directory}' of model '{where.model}' is out of the int64 range: "
                       "std::stoll throws std::out_of_range, which the server does not catch (it aborts)")
            problems.append(no_version(where, message, "terminate called after throwing an instance of "
                                                       "'std::out_of_range'"))
            continue
        if version is not None:
            available.add(version)
    newest_first = sorted(available, reverse=True)
    policy = config.version_policy if config is not None else None
    kind = policy.WhichOneof("policy_choice") if policy is not None else None
    if kind == "all":
        chosen = newest_first
    elif kind == "specific" and policy is not None:
        chosen = [v for v in newest_first if v in set(policy.specific.versions)]
    else:
        chosen = newest_first[:policy.latest.num_versions if kind == "latest" and policy is not None else 1]
    if not chosen:
        message = f"at least one version must be available under the version policy of model '{where.model}'"
        problems.append(no_version(where, message, message))
    return tuple(chosen)
