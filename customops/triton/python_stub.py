"""The Python backend's stub process for one model: which `triton_python_backend_stub` runs, with which execution
environment (EXECUTION_ENV_PATH) and which library path. The backend's own rules (python_backend src/stub_launcher.cc,
python_be.cc, pb_env.cc, pb_utils.cc; the core's model_config_utils.cc):

- the stub is `<model directory>/triton_python_backend_stub` where that exists, else the one in the backend's
  directory (`python_lib`: where libtriton_python.so was found, or a Python-based backend's directory, when it holds
  both the stub and triton_python_backend_utils.py; else `<backend directory>/python`);
- EXECUTION_ENV_PATH `$$TRITON_MODEL_DIRECTORY/...` names a path in the model's directory (the keyword anywhere else is
  replaced by a `std::string::replace` that also eats as many characters after it as there are before it); a
  directory is used in place, any other file is unpacked as gzip'd or plain tar into `/tmp/python_env_XXXXXX/<n>`;
  the environment must hold `bin/activate`;
- the stub runs with the server's environment, LD_PRELOAD included, and with an environment
  `LD_LIBRARY_PATH=<env>/lib:<env>/lib:<the server's>` (glibc reads it once, at the stub's start).
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path

from customops import cleanup
from customops.cachedir import trusted_root
from customops.codes import Code
from customops.emitters import emits
from customops.findings import Finding
from customops.frameworks import PYTHON
from customops.image import environment as archives
from customops.linker.prediction import Prediction
from customops.linker.types import StepOutcome
from customops.triton.plan import Context, LoadStep
from customops.triton.python_modules import Interpreter
from customops.triton.repository import Model

STUB = "triton_python_backend_stub"
UTILS = "triton_python_backend_utils.py"
KEYWORD = "$$TRITON_MODEL_DIRECTORY"
PARAMETER = "EXECUTION_ENV_PATH"
EXTRACTED = "/tmp/python_env_XXXXXX"  # mkdtemp's directory: its name is random, the check shows the template
FIRST_SECURE_RELEASE = "26.06"  # the first release whose backend refuses `..` and absolute members


@dataclass(frozen=True)
class ExecutionEnvironment:
    written: str  # EXECUTION_ENV_PATH as the config writes it
    path: str  # the container path the backend opens
    directory: str  # the container directory the stub runs with: the path, or where the archive is unpacked
    host: str  # where its files are on this machine (the directory, or the archive unpacked in customops' cache)
    archive: bool

    @property
    def lib(self) -> str:
        return f"{self.directory}/lib"


@dataclass(frozen=True)
class StubProcess:
    model: str
    instance: str  # the first stub's name in the backend's messages: "" for the auto-complete stub, else <model>_0
    version: int  # the model's version the stub loads
    program: str  # the stub's container path
    custom: bool  # the model directory's own stub
    python_lib: str  # the backend's directory of triton_python_backend_utils.py, on the stub's sys.path
    environment: ExecutionEnvironment | None
    config: str | None  # the model's config.pbtxt (findings about the environment point there)

    @property
    def unhealthy(self) -> str:
        """What the core says when the stub does not start (the backend waits 10 s for its first message)."""
        return f"failed to load '{self.model}' version {self.version}: Internal: Stub process '{self.instance}' is " \
               "not healthy."

    @property
    def library_path(self) -> tuple[str, ...]:
        """What the backend puts before the server's LD_LIBRARY_PATH."""
        return (self.environment.lib, self.environment.lib) if self.environment else ()

    @property
    def mounts(self) -> tuple[tuple[str, str], ...]:
        """An unpacked archive, where the stub sees it (the extraction directory)."""
        env = self.environment
        return ((env.directory, env.host),) if env is not None and env.archive else ()


def stub_for(model: Model, ctx: Context, library: str, unpacked_before: int = 0) -> tuple[StubProcess | None,
                                                                                          list[Finding]]:
    """The stub process that runs `model` (served by the Python backend `library`), or the findings that say why the
    backend cannot start one. `unpacked_before`: archives the backend unpacked for earlier models (their index)."""
    backend_dir = ctx.container.backend_dir
    model_dir = ctx.container_path(model.path)
    location = posixpath.dirname(library) if model.backend == PYTHON.backend else f"{backend_dir}/{model.backend}"
    own = ctx.exists(f"{location}/{STUB}") and ctx.exists(f"{location}/{UTILS}")
    python_lib = location if own else f"{backend_dir}/{PYTHON.backend}"
    custom = f"{model_dir}/{STUB}"
    program = custom if ctx.exists(custom) else f"{python_lib}/{STUB}"
    if not ctx.exists(program):
        message = f"{STUB} is not found. Searched paths: {backend_dir}/{PYTHON.backend} and {location}"
        return None, [stub_missing(model, f"the Python backend has no stub to start for model '{model.name}': "
                                          f"{message}", message)]
    environment, findings = _environment(model, ctx, model_dir, location, unpacked_before)
    if findings:
        return None, findings
    first = "" if ctx.auto_complete else f"{model.name}_0"  # the auto-complete stub starts before any instance's
    return StubProcess(model.name, first, model.versions[0], program, program == custom, python_lib, environment,
                       model.config_path), []


def written_path(value: str, model_dir: str) -> str:
    """EXECUTION_ENV_PATH as the core and then the backend rewrite it: the keyword at the start names the model's
    directory; anywhere else the backend's replace(pos, pos + 24, dir) also drops `pos` characters after it."""
    at = value.find(KEYWORD)
    if at < 0:
        return value
    if at == 0:
        return posixpath.normpath(model_dir + value[len(KEYWORD):])
    return value[:at] + model_dir + value[2 * at + len(KEYWORD):]


def _environment(model: Model, ctx: Context, model_dir: str, location: str,
                 index: int) -> tuple[ExecutionEnvironment | None, list[Finding]]:
    value = _parameter(model)
    if value is None and model.backend != PYTHON.backend:  # a Python-based backend's own environment
        shipped = f"{location}/pb_exec_env_model.py.tar.gz"
        value = shipped if ctx.exists(shipped) else None
    if not value:
        return None, []
    path = written_path(value, model_dir)
    path = path if path.startswith("/") else posixpath.normpath(posixpath.join(ctx.server_cwd, path))
    if not ctx.exists(path):
        return None, [_unusable(model, value, f"{path} does not exist in the container",
                                f"Failed to get the canonical path for {path}.")]
    host = ctx.source(path)
    if os.path.isdir(host):
        env = ExecutionEnvironment(value, path, path, host, archive=False)
    else:
        if not archives.readable(archives.head_of(host)):
            return None, [_unusable(model, value, f"{path} is neither a directory nor a gzip'd or plain tar archive "
                                    "(the backend reads no other format)", "archive_read_open_filename() failed.")]
        unpacked = archives.unpacked(host, _cache(ctx))
        if unpacked.escaping:
            return None, [_escaping(model, value, path, unpacked.escaping)]
        env = ExecutionEnvironment(value, path, f"{EXTRACTED}/{index}", str(unpacked.root), archive=True)
    activate = f"{env.directory}/bin/activate"
    if not os.path.lexists(os.path.join(env.host, "bin", "activate")) and not ctx.exists(activate):
        return None, [_unusable(model, value, f"the environment {path} has no bin/activate",
                                f"Path {activate} does not exist. The Python environment should contain an "
                                "'activate' script.")]
    return env, []


def _parameter(model: Model) -> str | None:
    parameters = getattr(model.config, "parameters", None)
    if parameters is None or PARAMETER not in parameters:
        return None
    return str(parameters[PARAMETER].string_value)


def _cache(ctx: Context) -> Path:
    """Where archives are unpacked: customops' cache, or with --no-cache a directory removed when the run ends."""
    cache = trusted_root(ctx.cache_dir) if ctx.cache_dir is not None else None
    if cache is None:
        cache = Path(tempfile.mkdtemp(prefix="customops-env-"))
        cleanup.register(str(cache))
    return cache


def _unusable(model: Model, value: str, why: str, predicted: str) -> Finding:
    return environment_unusable(model, f"model '{model.name}': EXECUTION_ENV_PATH \"{value}\" cannot be used: {why}",
                                f"failed to load '{model.name}' version {model.versions[0]}: Internal: {predicted}")


def _escaping(model: Model, value: str, path: str, names: tuple[str, ...]) -> Finding:
    return environment_unusable(
        model, f"model '{model.name}': the execution environment {path} has members that land outside the directory "
               f"it is unpacked into ({len(names)}{'+' if len(names) >= archives.MAX_SHOWN else ''}, first "
               f"{names[0]!r}): the backend writes them there before {FIRST_SECURE_RELEASE} and refuses the archive "
               "from then on", "archive_write_header() failed with error code = -25 error message is "
                               + ("Path is absolute" if names[0].startswith("/") else "Path contains '..'"),
        evidence=tuple(f"member: {n}" for n in names),
        hint="Pack the environment with paths relative to its top (conda-pack, or `tar -C ENV -czf env.tar.gz .`).")


@emits(Code.CO310)
def stub_missing(model: Model, message: str, predicted: str) -> Finding:
    """No stub in the model's directory nor in the backend's: the backend does not initialize."""
    return Finding(Code.CO310, message, model=model.name, file=model.config_path, predicted=predicted)


@emits(Code.CO312)
def environment_unusable(model: Model, message: str, predicted: str, evidence: tuple[str, ...] = (),
                         hint: str = "") -> Finding:
    """An execution environment the Python backend cannot use: missing, not a directory or gzip'd/plain tar, without
    bin/activate, or with members that climb out of its directory."""
    return Finding(Code.CO312, message, model=model.name, file=model.config_path, predicted=predicted,
                   evidence=evidence, hint=hint)


@dataclass(frozen=True)
class StubRun:
    """A stub process as the linker model ran it: its start, then each extension module the model's code imports
    (dlopen RTLD_NOW|RTLD_LOCAL, then dlsym of PyInit_<name>), paired with its step; the stub's Python, where it
    starts; notes on what was not followed."""

    stub: StubProcess
    prediction: Prediction
    outcomes: tuple[tuple[LoadStep, StepOutcome], ...] = ()
    python: Interpreter | None = None
    libpython: str | None = None  # the libpython3.X.so.1.0 the stub needs
    environment_python: str | None = None  # the Python its execution environment is made for (lib/python3.Y)
    notes: tuple[str, ...] = ()
    chains: tuple[tuple[str, tuple[str, ...]], ...] = ()  # each extension module's path, and the imports bringing it
    import_path: tuple[str, ...] = ()  # the stub's sys.path entries of the model and its environment, on this machine
    optional: frozenset[str] = frozenset()  # the modules imported only where the code handles their ImportError
