"""The command line: argument parsing and dispatch only; each subcommand lives in customops/commands/.

Exit status: 0 all good, 1 something will fail (or findings at/above --fail-on), 2 bad input or usage
(one line on stderr naming the file and the reason), 3 an internal error (a bug in customops). Standard
output that cannot be written (closed, a full disk) is bad input too: `customops: standard output: <reason>`,
2. A reader that goes away (`customops check ... | head -c1`) ends customops quietly with 141, the status a
shell reports for grep or cat ended by SIGPIPE. Interrupted: 130 (SIGINT), 143 (SIGTERM), after the cleanup
that `finally` blocks do, without a traceback.
"""

from __future__ import annotations

import argparse
import codecs
import errno
import gc
import os
import signal
import sys
from importlib import import_module
from typing import Any, NoReturn, TextIO

from customops import __version__, sigbus
from customops.errors import CustomopsError, printable

SUBCOMMANDS = ("check", "launch", "env", "explain", "releases", "scan", "resolve", "probe", "profile", "completion")
EXIT_INTERNAL = 3
EXIT_READER_GONE = 128 + signal.SIGPIPE
EXIT_TERMINATED = 128 + signal.SIGTERM


class Formatter(argparse.HelpFormatter):
    """argparse's formatter, as wide as shutil.get_terminal_size() says (argparse's own default), without
    importing shutil to ask (with bz2, lzma and fnmatch: ~3 ms of every start; argparse makes a formatter for
    every option it registers)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _terminal_columns() - 2 if width is None else width)


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns: $COLUMNS when a positive number, else standard output's terminal,
    else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class Parser(argparse.ArgumentParser):
    """argparse, with the offending argument in a usage error shown escaped (it may hold any bytes), and
    Formatter unless a parser names its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        super().error(printable(message))

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.unrecognized(extras)
        return namespace

    def unrecognized(self, extras: list[str]) -> NoReturn:
        """`unrecognized arguments: --container-rot (did you mean --container-root?)`, before the usage (as ruff
        and git put it: the line that says what is wrong is the one read first)."""
        hints = [(word, close) for word in extras if (close := self.closest_option(word))]
        message = f"unrecognized arguments: {' '.join(extras)}"
        if len(hints) == 1:
            message += f" (did you mean {hints[0][1]}?)"
        elif hints:
            message += " (did you mean " + ", ".join(f"{close} for {word}" for word, close in hints) + "?)"
        self.exit(2, f"{self.prog}: error: {printable(message)}\n{self.format_usage()}")

    def closest_option(self, word: str) -> str | None:
        """The option a mistyped `word` (`--container-rot`, `--container_root=DIR`, an abbreviation such as
        `--contianer`) most likely meant, or None (argparse of Python 3.14 has suggest_on_error; 3.10 does not)."""
        import difflib

        name = word.split("=", 1)[0]
        options = sorted(o for o in self._option_string_actions if o.startswith("--") and o != "--help")
        if not name.startswith("-") or name.strip("-") == "" or not options:
            return None
        close = difflib.get_close_matches(name, options, n=1, cutoff=0.75)
        if close:
            return close[0]
        scored = sorted((difflib.SequenceMatcher(None, name, o[:len(name)]).ratio(), o) for o in options
                        if len(o) > len(name) >= 5)  # an abbreviation: the options' beginnings of its length
        if scored and scored[-1][0] >= 0.8 and (len(scored) == 1 or scored[-2][0] < scored[-1][0]):
            return scored[-1][1]
        return None


class SubcommandParser(Parser):
    """A subcommand's parser: an argument it does not know is its own usage error (`customops check: error:
    unrecognized arguments: ...`, then its usage, exit 2), as ruff and docker report it, not the top-level usage
    that argparse shows once the unknown argument has travelled back up to `customops`; `--version` works after
    the subcommand too (`customops check --version`, as `ruff check --version`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("-V", "--version", action="version", version=f"customops {__version__}",
                          help="print the version and exit")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.unrecognized(extras)
        return namespace, extras


class Terminated(BaseException):
    """SIGTERM, raised wherever customops is, so that `finally` blocks remove what they created."""


class ReaderGone(Exception):
    """Standard output is a pipe whose reader has exited."""


class Output:
    """sys.stdout of the process: a write that fails names standard output (CustomopsError, exit 2) and a
    reader that went away is ReaderGone, where the bare OSError would be an internal error. `stream` is None
    when customops was started with descriptor 1 closed (`>&-`)."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._call("write", text))

    def flush(self) -> None:
        self._call("flush")

    def _call(self, name: str, *args: Any) -> Any:
        try:
            if self._stream is None:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            return getattr(self._stream, name)(*args)
        except BrokenPipeError:
            raise ReaderGone from None
        except OSError as exc:
            raise CustomopsError(f"standard output: {exc.strerror or exc}") from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or only `command`'s: registering a subcommand imports its module, and a
    launch that starts the server from a cached verdict should not pay for the other eight (~30 ms)."""
    parser = Parser(
        prog="customops",
        description="Will these custom-operation libraries load in this Triton container, and will they collide?",
    )
    parser.add_argument("-V", "--version", action="version", version=f"customops {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=SubcommandParser,
                                help="customops COMMAND --help describes each")
    for name in SUBCOMMANDS if command is None else (command,):
        import_module(f"customops.commands.{name}").register(sub)
    return parser


def _server_command(argv: list[str]) -> list[str] | None:
    """`customops check [OPTIONS] [REPO...] -- tritonserver ARGS`: the server's command line after the first
    `--`, taken off `argv` (check's positionals would swallow it); None when check is not given one."""
    if not argv or argv[0] != "check" or "--" not in argv:
        return None
    cut = argv.index("--")
    server = argv[cut + 1:]
    del argv[cut:]
    return server


def main(argv: list[str] | None = None) -> int:
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        server = _server_command(argv)
        args = build_parser(argv[0] if argv and argv[0] in SUBCOMMANDS else None).parse_args(argv)
        if server is not None:
            args.server = server
        code = int(args.run(args))
        sys.stdout.flush()  # a full disk or a closed descriptor shows here, where it can still be reported
        return code
    except CustomopsError as exc:
        print(f"customops: {printable(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return EXIT_TERMINATED
    except ReaderGone:
        return EXIT_READER_GONE
    except Exception as exc:  # never a traceback for users; CUSTOMOPS_DEBUG=1 shows it for developers
        if os.environ.get("CUSTOMOPS_DEBUG"):
            raise
        print(f"customops: internal error: {type(exc).__name__}: {printable(str(exc))} "
              "(set CUSTOMOPS_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL


def run() -> NoReturn:
    """The `customops` process: `main` without the cyclic garbage collector, then an exit that skips the
    interpreter's teardown. A check of framework libraries builds ~10^5 objects that all live until the
    report; the collector re-walking them and the teardown freeing them one by one cost ~0.15 s and ~0.1 s
    of a cold check, and nothing customops holds needs a finaliser: files are closed and cache entries
    renamed into place before `main` returns."""
    gc.disable()
    sigbus.arm()
    standard_streams()
    signal.signal(signal.SIGTERM, _terminated)
    code = main()
    registry = sys.modules.get("customops.cleanup")  # imported only by a run that made temporary directories
    if registry is not None:
        registry.remove_all()  # what is still registered (a throw-away skeleton): os._exit skips atexit
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, CustomopsError, ReaderGone):
        pass  # already reported by main, or nowhere left to report it
    os._exit(code)


def standard_streams() -> None:
    """Descriptors 0-2 that customops was started without are opened on /dev/null, so that no file it opens
    later becomes a child's standard stream or takes a report meant for standard output; writes to a
    closed standard output still fail (see Output). Errors never go to standard output (print(file=None)
    would): without a standard error they are lost. Text that standard output cannot encode is never an
    error: see _exact_or_escaped."""
    closed_stdout = sys.stdout is None
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the process)
    codecs.register_error("customops", _exact_or_escaped)
    if sys.stdout is not None:
        sys.stdout.reconfigure(errors="customops")  # type: ignore[union-attr]
    sys.stdout = Output(None if closed_stdout else sys.stdout)


def _exact_or_escaped(error: UnicodeError) -> tuple[str | bytes, int]:
    """A byte of a path that is not UTF-8 (decoded with surrogateescape) goes out as the byte it was, so that
    `customops env` and `launch --dry-run` print the exact path for a shell; anything else the encoding
    lacks is written `\\uNNNN`. Reports never get here: they escape such bytes first (report.escape)."""
    try:
        return codecs.lookup_error("surrogateescape")(error)
    except UnicodeError:
        return codecs.backslashreplace_errors(error)


def _terminated(_signum: int, _frame: object) -> None:
    raise Terminated
