"""The text ld.so prints and dlerror() returns, rendered from typed failures in glibc 2.36's exact wording.

The rules never parse these texts: they read the Failure; the text is the prediction shown to the user and
compared with the real ld.so (tests/test_linker_real.py).
"""

from __future__ import annotations

from customops.linker.types import Binding, Failure, FailureKind, StepOutcome

NOT_FOUND = "cannot open shared object file: No such file or directory"  # _dl_map_object, errno ENOENT
NO_SUCH_FILE = "No such file or directory"  # strerror(ENOENT)
PERMISSION_DENIED = "Permission denied"  # strerror(EACCES)
CANNOT_OPEN = "cannot open shared object file"

# open_verify (elf/dl-load.c) and _dl_map_object_from_fd: the reason, after the object's name
_FIXED_REASONS = {
    FailureKind.NOT_ELF: "invalid ELF header",
    FailureKind.GIT_LFS_POINTER: "invalid ELF header",
    FailureKind.FILE_TOO_SHORT: "file too short",
    FailureKind.WRONG_BYTE_ORDER: "ELF file data encoding not little-endian",
    FailureKind.NOT_LOADABLE_TYPE: "only ET_DYN and ET_EXEC can be loaded",
    FailureKind.BAD_PHENTSIZE: "ELF file's phentsize not the expected size",
    FailureKind.EXECUTABLE: "cannot dynamically load executable",
    FailureKind.PIE_EXECUTABLE: "cannot dynamically load position-independent executable",
    FailureKind.NOT_DLOPENABLE: "shared object cannot be dlopen()ed",  # dl-open.c dl_open_worker_begin
    FailureKind.WRONG_MACHINE: NOT_FOUND,  # open_verify skips it as if it were absent
}
LOOKUP_ASSERTION = ("Inconsistency detected by ld.so: dl-lookup.c: check_match: Assertion "
                    "`version->filename == NULL || ! _dl_name_match_p (version->filename, map)' failed!")


def reason(failure: Failure) -> str:
    """The part of the message after the object's name: _dl_signal_error's errstring, then the text of its
    errno where it has one (dlerror() appends it; the LD_PRELOAD warning does not)."""
    errno_text = _errno_text(failure)
    return errstring(failure) + (f": {errno_text}" if errno_text else "")


def _errno_text(failure: Failure) -> str:
    if failure.kind == FailureKind.DIRECTORY:
        return "Is a directory"  # EISDIR
    if failure.kind == FailureKind.UNREADABLE_HEADERS:
        return failure.detail
    if failure.kind == FailureKind.NOT_FOUND:
        return failure.detail  # errno 0 leaves the errno text out
    if failure.kind == FailureKind.PERMISSION_DENIED:
        return PERMISSION_DENIED
    return ""


def errstring(failure: Failure) -> str:
    """What _dl_signal_error is given as errstring: the message without its errno text."""
    kind = failure.kind
    if kind in _FIXED_REASONS:
        return _FIXED_REASONS[kind]
    if kind in (FailureKind.NOT_FOUND, FailureKind.PERMISSION_DENIED):
        return CANNOT_OPEN
    if kind == FailureKind.WRONG_CLASS:
        return f"wrong ELF class: ELFCLASS{failure.detail}"
    if kind in (FailureKind.UNREADABLE_HEADERS, FailureKind.DIRECTORY):  # open_verify: read() fails
        return "cannot read file data"
    if kind == FailureKind.MISSING_VERSION:  # elf/dl-version.c match_symbol
        return f"version `{failure.version}' not found (required by {failure.required_by})"
    if kind == FailureKind.UNDEFINED_SYMBOL:  # elf/dl-lookup.c _dl_lookup_symbol_x
        text = f"undefined symbol: {_text(failure.symbol)}"
        return text + (f", version {failure.version}" if failure.version else "")
    return failure.detail  # UNMAPPABLE: _dl_map_segments' own reason


def dlerror(failure: Failure) -> str:
    """What dlerror() returns (and what ld.so prints after its prefix at startup)."""
    if failure.kind == FailureKind.LOOKUP_ASSERTION:  # _dl_assert_fail: no object name
        return LOOKUP_ASSERTION
    return f"{failure.name}: {reason(failure)}"


def preload_warning(name: str, failure: Failure) -> str:
    """elf/rtld.c do_preload: the warning for an LD_PRELOAD entry that cannot be mapped (errstring only: no
    errno text)."""
    return f"ERROR: ld.so: object '{name}' from LD_PRELOAD cannot be preloaded ({errstring(failure)}): ignored."


def startup_error(progname: str, failure: Failure) -> str:
    """What ld.so prints (then exits 127) when the executable's dependencies cannot be loaded (elf/rtld.c
    dl_main via _dl_signal_error's fatal path), a version is missing, or a symbol is undefined at startup."""
    if failure.kind == FailureKind.UNDEFINED_SYMBOL:
        return symbol_lookup_error(progname, failure)
    if failure.kind == FailureKind.MISSING_VERSION:  # _dl_check_map_versions' fatal error
        return f"{progname}: {dlerror(failure)}"
    return f"{progname}: error while loading shared libraries: {dlerror(failure)}"


def symbol_lookup_error(progname: str, failure: Failure) -> str:
    """_dl_lookup_symbol_x's fatal error: at startup, or at the first call of a lazily bound function."""
    return f"{progname}: symbol lookup error: {dlerror(failure)}"


def unresolved(binding: Binding) -> Failure:
    """The failure of a reference that no object of its scope defines."""
    return undefined(binding.referrer, binding.symbol, binding.version)


def undefined(referrer: str, symbol: bytes, version: str | None) -> Failure:
    """_dl_lookup_symbol_x's failure: no definition of the name (and version) in the referrer's scope."""
    return Failure(FailureKind.UNDEFINED_SYMBOL, referrer, symbol=symbol, version=version)


def lazy_failure_messages(outcome: StepOutcome, progname: str) -> list[str]:
    """What ld.so prints, and the process dies with (exit 127), when each lazy failure is first called."""
    return [symbol_lookup_error(progname, unresolved(b)) for b in outcome.lazy_failures]


def no_version_information(provider: str, required_by: str) -> str:
    """elf/dl-version.c match_symbol's warning: the provider has no version definitions at all."""
    return f"{provider}: no version information available (required by {required_by})"


def weak_version_warning(failure: Failure) -> str:
    """elf/dl-version.c match_symbol's warning for a weak version reference the provider does not define."""
    return f"{failure.name}: weak {reason(failure)}"


def _text(symbol: bytes | None) -> str:
    return (symbol or b"").decode("utf-8", "replace")
