"""The linker model's inputs and outputs: what a process asks of ld.so, and what ld.so does, as plain records.

Outcomes are typed (StepKind, StepStatus, FailureKind, AttemptResult; a definition's binding, type and
visibility, a binding's relocation and reason) so that rules decide from the kind of failure and its fields; the text
ld.so or dlerror() prints is rendered from a Failure by customops.linker.messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from customops.elf.constants import Relocation, SymbolBind, SymbolType, SymbolVisibility
from customops.textenum import TextEnum


class StepKind(TextEnum):
    STARTUP = "startup"
    PRELOAD = "preload"
    DLOPEN = "dlopen"


class StepStatus(TextEnum):
    LOADED = "loaded"
    FAILED = "failed"  # dlopen returned NULL; the process goes on
    IGNORED = "ignored"  # an LD_PRELOAD entry ld.so could not map: a warning, the process starts without it
    FATAL = "fatal"  # the process does not start, or dies
    CRASH = "crash"  # ld.so stops on one of its assertions


class CallStatus(TextEnum):
    OK = "ok"
    NOT_FOUND = "not found"


class FailureKind(TextEnum):
    """Why ld.so refused a load, one kind for each message it can print."""

    NOT_FOUND = "not-found"  # no candidate in any search directory, or an explicit path that does not exist
    PERMISSION_DENIED = "permission-denied"  # open() fails with EACCES
    DIRECTORY = "directory"  # open() of a directory succeeds, then read() fails with EISDIR
    WRONG_CLASS = "wrong-class"  # only files of the other ELF class were found
    WRONG_MACHINE = "wrong-machine"  # an explicit path to another machine's file: skipped as if absent
    NOT_ELF = "not-elf"  # no ELF magic
    GIT_LFS_POINTER = "git-lfs-pointer"  # no ELF magic: the text Git LFS commits in place of the file
    FILE_TOO_SHORT = "file-too-short"
    WRONG_BYTE_ORDER = "wrong-byte-order"
    NOT_LOADABLE_TYPE = "not-loadable-type"  # neither ET_DYN nor ET_EXEC
    BAD_PHENTSIZE = "bad-phentsize"
    UNREADABLE_HEADERS = "unreadable-headers"  # the program header table cannot be read
    UNMAPPABLE = "unmappable"  # the segments cannot be mapped (`detail`: _dl_map_segments' reason)
    EXECUTABLE = "executable"  # an ET_EXEC file cannot be dlopen()ed
    PIE_EXECUTABLE = "pie-executable"
    NOT_DLOPENABLE = "not-dlopenable"  # DF_1_NOOPEN
    MISSING_VERSION = "missing-version"  # a version node the provider does not define
    UNDEFINED_SYMBOL = "undefined-symbol"
    LOOKUP_ASSERTION = "lookup-assertion"  # check_match's assertion: a versioned reference, a provider without versym


# Failures that mean the file is not a loadable ELF object for this process (rather than absent or unresolved)
NOT_LOADABLE = frozenset({FailureKind.WRONG_CLASS, FailureKind.NOT_ELF, FailureKind.GIT_LFS_POINTER,
                          FailureKind.FILE_TOO_SHORT, FailureKind.WRONG_BYTE_ORDER, FailureKind.NOT_LOADABLE_TYPE,
                          FailureKind.NOT_DLOPENABLE})
# Failures where the file exists, but is something other than what its dlerror() text suggests
FILE_PROBLEMS = frozenset({FailureKind.PERMISSION_DENIED, FailureKind.GIT_LFS_POINTER, FailureKind.DIRECTORY})


@dataclass(frozen=True)
class Failure:
    """One refused load, typed. `name` is the object ld.so's message starts with (the requested name, a
    candidate path, the version's provider or the symbol's referrer); the other fields are those its kind has."""

    kind: FailureKind
    name: str
    detail: str = ""  # the errno text (NOT_FOUND, UNREADABLE_HEADERS), the class (WRONG_CLASS), the reason
    symbol: bytes | None = None  # UNDEFINED_SYMBOL
    version: str | None = None  # MISSING_VERSION, UNDEFINED_SYMBOL
    required_by: str | None = None  # MISSING_VERSION: the object that needs the version


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Environment:
    """The part of the process environment ld.so reads."""

    library_path: str | None = None  # LD_LIBRARY_PATH
    preload: str | None = None  # LD_PRELOAD
    bind_now: bool = False  # LD_BIND_NOW
    dynamic_weak: bool = False  # LD_DYNAMIC_WEAK
    cwd: str = "/"


@dataclass(frozen=True)
class Dlopen:
    """One dlopen() call. `caller` is the object calling dlopen (its RPATH/RUNPATH apply to a bare
    name); None means the executable. `calls` are functions then looked up with dlsym and called."""

    path: str
    lazy: bool = False
    make_global: bool = False
    deepbind: bool = False
    calls: tuple[str, ...] = ()
    caller: str | None = None
    label: str = ""


@dataclass(frozen=True)
class Scenario:
    executable: str  # target path of the program ld.so starts
    environment: Environment = Environment()
    steps: tuple[Dlopen, ...] = ()


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


class AttemptResult(TextEnum):
    """What became of one candidate of a search (open_verify's answer), or why it was not tried."""

    FOUND = "found"
    NOT_FOUND = "not found"
    UNREADABLE = "unreadable"  # it cannot be opened or read: `detail` says why, when the system did
    REFUSED = "refused"  # not loadable here (the other ELF class included): `detail` is ld.so's reason
    WRONG_MACHINE = "wrong machine, skipped"
    NOT_IN_CACHE = "not in cache"
    NODEFLIB = "skipped: loader has DF_1_NODEFLIB"


@dataclass(frozen=True)
class SearchAttempt:
    search_list: str  # e.g. "RPATH of libtop.so", "LD_LIBRARY_PATH", "ld.so.cache", "system directories"
    path: str
    result: AttemptResult
    detail: str = ""  # UNREADABLE's and REFUSED's reason, e.g. "wrong ELF class: ELFCLASS32"

    @property
    def text(self) -> str:
        """The result as a trace shows it: its reason where it has one."""
        return self.detail or self.result.value


@dataclass(frozen=True)
class Search:
    name: str
    requested_by: str
    attempts: tuple[SearchAttempt, ...]
    found: str | None
    error: str | None


@dataclass(frozen=True)
class Definition:
    object: str  # l_name of the defining object
    symbol: bytes
    version: str | None
    binding: SymbolBind | int  # a number elf.h does not name stays a number
    type: SymbolType | int
    visibility: SymbolVisibility
    size: int


class BindingReason(TextEnum):
    """Why a binding's winner won, where the order of the scope alone does not say."""

    SCOPE_ORDER = ""  # the first acceptable definition in scope order: nothing more to say
    PROTECTED = "protected"  # a protected definition: the object's own references bind to it
    SYMBOLIC = "-Bsymbolic"  # a -Bsymbolic object binds its own references to itself
    GNU_UNIQUE = "GNU_UNIQUE: the first definition loaded in the process wins"
    COPY_RELOCATION = "copy relocation: the executable holds the object and every reference binds to it"


@dataclass(frozen=True)
class Binding:
    referrer: str
    symbol: bytes
    version: str | None
    relocation: Relocation  # NOW, LAZY or COPY
    weak_reference: bool
    winner: Definition | None
    losers: tuple[Definition, ...] = ()
    reason: BindingReason = BindingReason.SCOPE_ORDER
    error: str = ""  # dlerror()'s text when the lookup of a strong reference finds no definition


@dataclass(frozen=True)
class ConstructorCall:
    """A lazily bound function nothing defines that a constructor of its referrer calls as the object is
    initialised (elf.reach): the first call, so the process dies there. `constructor` is the function's name
    (its symbol, or its address), `where` where ld.so finds it (DT_INIT_ARRAY[1]), `chain` the functions
    called on the way, the constructor first."""

    binding: Binding
    constructor: str
    where: str
    chain: tuple[str, ...]


@dataclass(frozen=True)
class ConstructorReach:
    """What one lazily bound object's constructors call of its functions that nothing defines, first called
    first, and why more may be called than these ("" when every call of their code was followed)."""

    library: str
    calls: tuple[ConstructorCall, ...]
    undecided: str = ""


@dataclass(frozen=True)
class CallOutcome:
    symbol: str
    status: CallStatus
    message: str
    definition: Definition | None


@dataclass(frozen=True)
class StepOutcome:
    """What one preload or dlopen does (or the startup): `message` is what ld.so prints or dlerror() returns,
    rendered from `failure`."""

    kind: StepKind
    request: str
    label: str
    status: StepStatus
    message: str
    warnings: tuple[str, ...]
    loaded: tuple[str, ...]
    searches: tuple[Search, ...]
    unresolved: tuple[Binding, ...]  # references that fail (at load, or at first call when lazy)
    lazy_failures: tuple[Binding, ...]
    version_errors: tuple[str, ...]
    calls: tuple[CallOutcome, ...] = ()
    failure: Failure | None = None
    constructors: tuple[ConstructorReach, ...] = ()  # of objects with lazy failures, in the order they run

    @property
    def ok(self) -> bool:
        return self.status == StepStatus.LOADED

    @property
    def not_found(self) -> Search | None:
        """The last search that found nothing: the dependency whose absence stopped this step."""
        return next((s for s in reversed(self.searches) if s.found is None), None)

    @property
    def problem(self) -> Failure | None:
        """The failure when the failing file exists but is not what its message suggests (unreadable, a Git
        LFS pointer): its `name` is the file as requested."""
        return self.failure if self.failure is not None and self.failure.kind in FILE_PROBLEMS else None


@dataclass(frozen=True)
class LoadedObject:
    name: str  # l_name
    path: str  # host path
    soname: str | None
    loaded_by: str | None
    step: int  # index of the outcome that loaded it
