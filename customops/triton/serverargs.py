"""tritonserver's command line, read the way the server reads it: glibc's getopt_long over the long options
TritonParser declares (customops/data/tritonserver-options.json, from the server's command_line_parser.cc),
then the checks TritonParser makes of the values customops uses. Nothing is changed, except that a TensorRT
`plugins=` setting the user already gave is merged with the manifest's rather than given twice.

getopt_long's rules: `--name=value` or `--name value` (the next word is the value whatever it looks like),
a unique prefix of a name stands for it (`--model-repo`), options and other words may mix (the server then
refuses the other words: "Unexpected argument"), `--` ends the options. `--backend-config` takes one setting
per flag: `<backend>,<setting>=<value>`, split at the first comma and the next equals sign.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache

from customops import packagedata
from customops.errors import CustomopsError, printable
from customops.frameworks import TENSORRT

TRITON_HOME = "/opt/tritonserver"
DEFAULT_BACKEND_DIRECTORY = f"{TRITON_HOME}/backends"  # where the server looks without --backend-directory
SERVER = f"{TRITON_HOME}/bin/tritonserver"  # the process that loads everything in a Triton container
# Triton core, which every backend links: core/src/CMakeLists.txt builds it with OUTPUT_NAME tritonserver and no
# VERSION, so its SONAME has no version; every release's server ships it in TRITON_HOME/lib
SERVER_LIBRARY = "libtritonserver.so"
SERVER_CWD = TRITON_HOME  # its working directory in the NGC images (relative dlopen paths start there)
STAND_IN_HOSTS = ("/usr/bin/true", "/bin/true", "/bin/sh")  # a target without the server: a plain program
CLOUD = ("s3://", "gs://", "as://")  # repositories the server reads from cloud storage (core filesystem/api.cc)
TRUE, FALSE = ("true", "on", "1"), ("false", "off", "0")  # ParseOption<bool>, case-insensitive


@dataclass(frozen=True)
class ServerOption:
    name: str
    id: str  # two names of one option share it (model-store, model-repository)
    argument: bool  # required_argument (every option but --help and --disable-auto-complete-config)


@dataclass(frozen=True)
class BackendSetting:
    backend: str
    setting: str
    value: str
    index: int  # position of the argument in argv (the value's token when given as `--backend-config X`)


@dataclass(frozen=True)
class ServerArgs:
    argv: tuple[str, ...]  # as given, program first
    repositories: tuple[str, ...] = ()
    backend_directory: str | None = None
    backend_settings: tuple[BackendSetting, ...] = ()
    model_config_name: str | None = None
    control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    exit_on_error: bool = True
    auto_complete: bool = True  # False with --disable-auto-complete-config or --strict-model-config=true
    model_namespacing: bool = False
    options: dict[str, list[str]] = field(default_factory=dict)  # option id -> values, in order
    unknown: tuple[str, ...] = ()  # options this server's parser does not declare (a newer server may)

    def setting(self, backend: str, name: str) -> BackendSetting | None:
        return next((s for s in self.backend_settings if s.backend == backend and s.setting == name), None)

    @property
    def models_to_check(self) -> set[str] | None:
        """None: every model in the repositories. In explicit mode only the named ones load at startup."""
        if self.control_mode != "explicit" or "*" in self.load_models:
            return None
        return set(self.load_models)

    @property
    def local_repositories(self) -> tuple[str, ...]:
        return tuple(r for r in self.repositories if not r.startswith(CLOUD))

    @property
    def cloud_repositories(self) -> tuple[str, ...]:
        return tuple(r for r in self.repositories if r.startswith(CLOUD))


@cache
def server_options() -> dict[str, ServerOption]:
    text = packagedata.read_text("tritonserver-options.json")
    return {name: ServerOption(name, o["id"], o["argument"]) for name, o in json.loads(text)["options"].items()}


def option_named(name: str) -> ServerOption | None:
    """getopt_long's lookup: the exact name, else the one option a prefix stands for (several names of one
    option are one); None when no name starts so. CustomopsError for an ambiguous prefix."""
    options = server_options()
    if name in options:
        return options[name]
    found = [o for n, o in options.items() if n.startswith(name)]
    if len({(o.id, o.argument) for o in found}) > 1:
        possibilities = " ".join(f"'--{o.name}'" for o in found)
        raise _refused(f"option '--{name}' is ambiguous; possibilities: {possibilities}")
    return found[0] if found else None


def parse(argv: list[str]) -> ServerArgs:
    if not argv:
        raise CustomopsError("no server command given (customops launch -- tritonserver ...)")
    if argv[0].startswith("--") or (argv[0].startswith("-") and "/" not in argv[0]):
        # `launch -- --model-repository=R`: the program is missing (`-dir/tritonserver` is a program's path)
        raise CustomopsError(f"the server's command line starts with the option {printable(argv[0])}: give the "
                             f"program first: -- tritonserver {printable(argv[0])} ...")
    options: dict[str, list[str]] = {}
    settings: list[BackendSetting] = []
    unknown: list[str] = []
    others: list[str] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            others += argv[i + 1:]
            break
        if not token.startswith("-") or token == "-":
            others.append(token)  # permuted to the end by getopt_long; the server refuses it below
            i += 1
            continue
        if not token.startswith("--"):
            raise _refused(f"invalid option -- '{printable(token[1])}'")
        name, eq, value = token[2:].partition("=")
        option = option_named(name)
        value_index = i
        if option is None:  # a newer server's option, perhaps: its value taken as such an option would take it
            unknown.append(token.split("=", 1)[0])
            if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                i += 1
            i += 1
            continue
        if option.argument and not eq:
            if i + 1 >= len(argv):
                raise _refused(f"option '--{option.name}' requires an argument")
            i += 1
            value, value_index = argv[i], i
        elif eq and not option.argument:
            raise _refused(f"option '--{option.name}' doesn't allow an argument")
        options.setdefault(option.id, []).append(value)
        if option.id == "backend-config":
            settings.append(_backend_setting(value, value_index))
        i += 1
    if others:
        raise _refused(f"Unexpected argument: {printable(others[0])}")
    return _checked(argv, options, settings, unknown)


def _checked(argv: list[str], options: dict[str, list[str]], settings: list[BackendSetting],
             unknown: list[str]) -> ServerArgs:
    """TritonParser's checks of the values customops reads, with its messages."""
    mode = (options.get("model-control-mode") or ["none"])[-1].lower()
    if mode not in ("none", "poll", "explicit"):
        raise _refused("Bad option: \"--model-control-mode\". invalid argument for --model-control-mode")
    load = tuple(options.get("startup-model", []))
    if load and mode != "explicit":
        raise _refused("Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as well.")
    names = options.get("custom-model-config-name", [])
    if any(not n for n in names):
        raise _refused("Error: empty argument for --model-config-name")
    strict = _flag(options, "strict-model-config", False)
    return ServerArgs(
        argv=tuple(argv),
        repositories=tuple(dict.fromkeys(options.get("model-repository", []))),
        backend_directory=_last(options.get("backend-dir")),
        backend_settings=tuple(settings),
        model_config_name=_last(names),
        control_mode=mode,
        load_models=load,
        exit_on_error=_flag(options, "exit-on-error", True),
        auto_complete=not ("disable-auto-complete-config" in options or strict),
        model_namespacing=_flag(options, "model-namespacing", False),
        options=options,
        unknown=tuple(unknown),
    )


def _flag(options: dict[str, list[str]], name: str, default: bool) -> bool:
    """ParseOption<bool> of the last value given (these options' ids are their names)."""
    values = options.get(name)
    if not values:
        return default
    value = values[-1].lower()
    if value not in TRUE + FALSE:
        raise _refused(f"Bad option: \"--{name}\". invalid value for bool option: {printable(values[-1])}")
    return value in TRUE


def _backend_setting(value: str, index: int) -> BackendSetting:
    backend, comma, rest = value.partition(",")
    setting, equals, setting_value = rest.partition("=")
    if not comma or not equals:
        raise CustomopsError(f"--backend-config={printable(value)}: expected <backend>,<setting>=<value>")
    return BackendSetting(backend, setting, setting_value, index)


def _refused(message: str) -> CustomopsError:
    """The server's own refusal of its command line (it prints its usage and exits without starting)."""
    return CustomopsError(f"tritonserver would refuse its command line: {message}")


def unchecked(args: ServerArgs) -> list[str]:
    """Notes on what a command line leaves unchecked: a repository in cloud storage is never fetched (its models
    are not checked, the preloads, backends and container still are); an option this server's parser does not
    declare is passed on as it is (a newer server may have it)."""
    notes = [f"not checked: the models of {r} (cloud storage, which customops does not read); the preloads, "
             "backends and container still are. To check those models, download a copy and pass it: customops "
             "check ./copy" for r in args.cloud_repositories]
    if args.control_mode == "explicit" and not args.load_models:
        notes.append("--model-control-mode=explicit without --load-model: no model loads at startup")
    return notes + [f"{u}: not an option of the tritonserver customops knows (a newer server's?); passed on, "
                    "unchecked" for u in args.unknown]


def tensorrt_plugins(args: ServerArgs) -> tuple[str, ...]:
    """The libraries `--backend-config=tensorrt,plugins=A;B` makes the TensorRT backend dlopen() at its
    initialisation, in order: the value split at each `;` as tensorrt_backend/src/tensorrt.cc does (an empty
    piece names no file here). `check` and `launch` both read them from here."""
    setting = args.setting(TENSORRT.backend, TENSORRT.plugins)
    return tuple(p for p in setting.value.split(";") if p) if setting is not None else ()


def with_plugins(args: ServerArgs, plugins: tuple[str, ...]) -> list[str]:
    """The argv with the TensorRT plugins added: merged into the user's own `plugins=` setting if there
    is one (its position kept), else one more `--backend-config` at the end."""
    argv = list(args.argv)
    if not plugins:
        return argv
    existing = args.setting(TENSORRT.backend, TENSORRT.plugins)
    setting = f"{TENSORRT.backend},{TENSORRT.plugins}="
    if existing is None:
        return [*argv, f"--backend-config={setting}" + ";".join(plugins)]
    have = [p for p in existing.value.split(";") if p]
    merged = have + [p for p in plugins if p not in have]
    token = argv[existing.index]
    prefix = token.split("=", 1)[0] + "=" if token.startswith("--") else ""
    argv[existing.index] = prefix + setting + ";".join(merged)
    return argv


def _last(values: list[str] | None) -> str | None:
    """A flag given several times: tritonserver keeps the last value."""
    return values[-1] if values else None
