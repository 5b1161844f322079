"""tritonserver's command line, read the way the server reads it (getopt_long: `--flag=value` and
`--flag value`), without changing it: customops only adds arguments, except that a TensorRT `plugins=`
setting the user already gave is merged with the manifest's rather than given twice.

`--backend-config` takes one setting per flag: `<backend>,<setting>=<value>`, split at the first comma
and the next equals sign; the rest is the value (server `command_line_parser.cc` ParseBackendConfigOption).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from customops.errors import CustomopsError

DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"  # where the server looks without --backend-directory


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
    options: dict[str, list[str]] = field(default_factory=dict)

    def setting(self, backend: str, name: str) -> BackendSetting | None:
        return next((s for s in self.backend_settings if s.backend == backend and s.setting == name), None)

    @property
    def models_to_check(self) -> set[str] | None:
        """None: every model in the repositories. In explicit mode only the named ones load at startup."""
        if self.control_mode != "explicit" or "*" in self.load_models:
            return None
        return set(self.load_models)


def parse(argv: list[str]) -> ServerArgs:
    if not argv:
        raise CustomopsError("no server command given (customops launch -- tritonserver ...)")
    options: dict[str, list[str]] = {}
    settings: list[BackendSetting] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            i += 1
            continue
        name, eq, value = token[2:].partition("=")
        value_index = i
        if not eq:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value, value_index = argv[i + 1], i + 1
                i += 1
            else:
                value = ""
        options.setdefault(name, []).append(value)
        if name == "backend-config":
            backend, comma, rest = value.partition(",")
            setting, equals, setting_value = rest.partition("=")
            if not comma or not equals:
                raise CustomopsError(f"--backend-config={value}: expected <backend>,<setting>=<value>")
            settings.append(BackendSetting(backend, setting, setting_value, value_index))
        i += 1
    exit_on_error = options.get("exit-on-error", ["true"])[-1].lower() not in ("false", "0", "no", "off")
    return ServerArgs(
        argv=tuple(argv),
        repositories=tuple(options.get("model-repository", []) + options.get("model-store", [])),
        backend_directory=_last(options.get("backend-directory")),
        backend_settings=tuple(settings),
        model_config_name=_last(options.get("model-config-name")),
        control_mode=(options.get("model-control-mode") or ["none"])[-1].lower(),
        load_models=tuple(options.get("load-model", [])),
        exit_on_error=exit_on_error,
        options=options,
    )


def with_plugins(args: ServerArgs, plugins: tuple[str, ...]) -> list[str]:
    """The argv with the TensorRT plugins added: merged into the user's own `plugins=` setting if there
    is one (its position kept), else one more `--backend-config` at the end."""
    argv = list(args.argv)
    if not plugins:
        return argv
    existing = args.setting("tensorrt", "plugins")
    if existing is None:
        return [*argv, "--backend-config=tensorrt,plugins=" + ";".join(plugins)]
    have = [p for p in existing.value.split(";") if p]
    merged = have + [p for p in plugins if p not in have]
    token = argv[existing.index]
    prefix = "--backend-config=" if token.startswith("--backend-config=") else ""
    argv[existing.index] = prefix + "tensorrt,plugins=" + ";".join(merged)
    return argv


def _last(values: list[str] | None) -> str | None:
    """A flag given several times: tritonserver keeps the last value."""
    return values[-1] if values else None
