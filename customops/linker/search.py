"""Finding and opening a library as elf/dl-load.c does: _dl_map_object's search order, _dl_dst_substitute's
dynamic string tokens, and open_verify's checks of each candidate's header."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum, auto

from customops import safeio
from customops.elf.constants import EI_CLASS, EI_DATA, ELF_MAGIC, ET_DYN, ET_EXEC, ElfClass, ElfData
from customops.elf.header import ElfHeader, ElfHeaderError, is_git_lfs_pointer, read_header
from customops.errors import InputError
from customops.linker.linkmap import LinkMap
from customops.linker.messages import NO_SUCH_FILE, PERMISSION_DENIED, dlerror, reason
from customops.linker.target import LinkerTarget
from customops.linker.types import AttemptResult, Environment, Failure, FailureKind, Search, SearchAttempt

MIN_HEADER = 52  # the smallest header open_verify accepts (sizeof(Elf32_Ehdr))
LD_SO_BUFFER = 832  # open_verify's first read: program headers inside it need no pread()


class LoadFailed(Exception):
    """A load error, typed: what dlerror() will say is rendered from `failure`."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(dlerror(failure))
        self.failure = failure


class Verdict(Enum):
    """open_verify's answer for one candidate file."""

    OK = auto()
    ABSENT = auto()  # no such file (or it cannot be opened): the search goes on
    OTHER_CLASS = auto()  # the other ELF class: skipped, remembered for the final message
    OTHER_MACHINE = auto()  # another machine: skipped
    REFUSED = auto()  # not a loadable file: the search stops with this error


@dataclass(frozen=True)
class Candidate:
    verdict: Verdict
    result: AttemptResult = AttemptResult.FOUND  # what the search trace says of it
    detail: str = ""  # UNREADABLE's and REFUSED's reason
    failure: Failure | None = None  # OTHER_CLASS and REFUSED: what dlerror() would say

    @classmethod
    def refused(cls, path: str, kind: FailureKind, detail: str = "", verdict: Verdict = Verdict.REFUSED) -> Candidate:
        failure = Failure(kind, path, detail)
        return cls(verdict, AttemptResult.REFUSED, reason(failure), failure)

    def attempt(self, search_list: str, path: str) -> SearchAttempt:
        return SearchAttempt(search_list, path, self.result, self.detail)


MISSING = Candidate(Verdict.ABSENT, AttemptResult.NOT_FOUND)  # no file at the path


@dataclass
class _Trace:
    attempts: list[SearchAttempt] = field(default_factory=list)
    other_class: bool = False


class LibrarySearch:
    """The search of one process: its target, environment, executable and ELF machine."""

    def __init__(self, target: LinkerTarget, env: Environment, progname: str) -> None:
        self.target = target
        self.env = env
        self.progname = progname
        self.main: LinkMap | None = None
        self.machine = (0, 0)  # (e_machine, ELF class) of the executable: what every library must be
        self._missing_dirs: dict[str, bool] = {}

    # -- an explicit path ---------------------------------------------------------------------
    def open_path(self, name: str, loader: LinkMap) -> str:
        """A name with a slash is opened as it is (after $ORIGIN and friends); no search."""
        path = self.expand(name, loader)
        if path is None:
            raise LoadFailed(Failure(FailureKind.NOT_FOUND, name, NO_SUCH_FILE))
        candidate = self.verify(path)
        if candidate.verdict == Verdict.ABSENT and (candidate.detail == PERMISSION_DENIED
                                                    or self._access_denied(path)):
            raise LoadFailed(Failure(FailureKind.PERMISSION_DENIED, name))  # open() fails with EACCES
        if candidate.verdict == Verdict.ABSENT:
            raise LoadFailed(Failure(FailureKind.NOT_FOUND, name, NO_SUCH_FILE))
        if candidate.verdict == Verdict.OTHER_MACHINE:
            raise LoadFailed(Failure(FailureKind.WRONG_MACHINE, name))
        if candidate.failure is not None:
            raise LoadFailed(replace(candidate.failure, name=name))
        return path

    def _access_denied(self, path: str) -> bool:
        """Is a path that resolves to nothing hidden by a permission (EACCES) rather than absent: can the
        deepest existing directory above it not be searched for its next component? (For a dlopen path's
        failure only: a search's candidates are not asked.)"""
        parts = self.absolute(path).rstrip("/").split("/")
        for cut in range(len(parts) - 1, 0, -1):
            host = self.target.host_path("/".join(parts[:cut]) or "/")
            if host is None:
                continue
            try:
                os.lstat(os.path.join(host, parts[cut]))
            except PermissionError:
                return True
            except OSError:
                return False
            return False
        return False

    # -- the search ---------------------------------------------------------------------------
    def find(self, name: str, loader: LinkMap) -> tuple[Search, str | None, Failure | None]:
        """_dl_map_object's search for a bare name: RPATH chain, LD_LIBRARY_PATH, RUNPATH, ld.so.cache,
        the default directories. Raises LoadFailed when a candidate is refused; a search that finds nothing
        gives its failure."""
        trace = _Trace()
        found = self._in_rpaths(name, loader, trace)
        if found is None and self.env.library_path:  # _dl_init_paths: an empty value is no list at all
            dirs = self.env.library_path.replace(";", ":").split(":")
            found = self._try_dirs(name, self._expand_list(tuple(dirs), self.main), "LD_LIBRARY_PATH", trace)
        if found is None and loader.info.runpath:
            label = "RUNPATH of " + (loader.name or self.progname)
            found = self._try_dirs(name, self._expand_list(loader.info.runpath, loader), label, trace)
        errno_cleared = False
        if found is None and self.target.cache is not None:
            found, errno_cleared = self._in_cache(name, loader, trace)
        if found is None and self.target.cache is None and self.target.conf_dirs:
            found = self._try_dirs(name, self.target.conf_dirs, "ld.so.conf", trace)
        if found is None:
            if loader.info.nodeflib:
                trace.attempts.append(SearchAttempt("system directories", ":".join(self.target.system_dirs),
                                                    AttemptResult.NODEFLIB))
            else:
                found = self._try_dirs(name, self.target.system_dirs, "system directories", trace)
        failure = None if found is not None else self._not_found(name, trace, errno_cleared)
        search = Search(name, loader.name or self.progname, tuple(trace.attempts), found,
                        dlerror(failure) if failure else None)
        return search, found, failure

    def _not_found(self, name: str, trace: _Trace, errno_cleared: bool) -> Failure:
        if trace.other_class:
            return Failure(FailureKind.WRONG_CLASS, name, str(64 if self.machine[1] == 32 else 32))
        return Failure(FailureKind.NOT_FOUND, name, "" if errno_cleared else NO_SUCH_FILE)

    def _in_rpaths(self, name: str, loader: LinkMap, trace: _Trace) -> str | None:
        """The loader, its loaders up the chain, then the executable when the chain does not end there; only
        those with an RPATH are tried, and none when the loader has a RUNPATH."""
        if loader.info.runpath:
            return None
        chain: list[LinkMap | None] = [loader if loader.effective_rpath else loader.rpath_next]
        if self.main is not None and loader.top is not self.main and self.main.effective_rpath:
            chain.append(self.main)
        for first in chain:
            obj = first
            while obj is not None:
                label = "RPATH of " + (obj.name or self.progname)
                found = self._try_dirs(name, self._expand_list(obj.effective_rpath, obj), label, trace)
                if found is not None:
                    return found
                obj = obj.rpath_next
        return None

    def _in_cache(self, name: str, loader: LinkMap, trace: _Trace) -> tuple[str | None, bool]:
        """ld.so.cache (elf/dl-cache.c _dl_load_cache_lookup); also says whether errno was cleared."""
        assert self.target.cache is not None
        hit = self.target.cache.lookup(name, *self.machine)
        if hit is None:
            trace.attempts.append(SearchAttempt("ld.so.cache", name, AttemptResult.NOT_IN_CACHE))
            return None, False
        if loader.info.nodeflib and any(hit.startswith(d.rstrip("/") + "/") for d in self.target.system_dirs):
            # glibc 2.36 opens the cached file, then drops it; errno is 0 when the search ends.
            trace.attempts.append(SearchAttempt("ld.so.cache", hit, AttemptResult.NODEFLIB))
            return None, True
        candidate = self.verify(hit)
        trace.attempts.append(candidate.attempt("ld.so.cache", hit))
        trace.other_class |= candidate.verdict == Verdict.OTHER_CLASS
        return (hit if candidate.verdict == Verdict.OK else None), False

    def _try_dirs(self, name: str, dirs: Iterable[str], search_list: str, trace: _Trace) -> str | None:
        """open_path: each directory, its hwcaps subdirectories first."""
        for directory in dirs:
            for sub in (*self.target.search_subdirs, ""):
                # An empty element means the current directory: the candidate is the bare name.
                base = directory if not directory or directory.endswith("/") else directory + "/"
                candidate = base + (sub + "/" if sub else "") + name
                # what verify finds in a missing directory, without a lookup per name
                checked = MISSING if base and self._no_directory(base + sub) else self.verify(candidate)
                trace.attempts.append(checked.attempt(search_list, candidate))
                if checked.verdict == Verdict.OK:
                    return candidate
                trace.other_class |= checked.verdict == Verdict.OTHER_CLASS
                if checked.verdict == Verdict.REFUSED and checked.failure is not None:
                    raise LoadFailed(checked.failure)
        return None

    def _no_directory(self, directory: str) -> bool:
        """Is there no directory at this target path? Then no file is found inside it. Remembered for the
        process, as ld.so remembers search directories that do not exist: a library's search tries every
        hwcaps subdirectory of every search directory, most of which are missing."""
        missing = self._missing_dirs.get(directory)
        if missing is None:
            host = self.host(directory)
            missing = self._missing_dirs[directory] = host is None or not os.path.isdir(host)
        return missing

    # -- open_verify --------------------------------------------------------------------------
    def verify(self, path: str) -> Candidate:
        """open_verify (elf/dl-load.c): is this candidate loadable here?"""
        host = self.host(path)
        if host is None:
            return MISSING
        if os.path.isdir(host):  # open(O_RDONLY) succeeds, reading the ELF header fails: a hard error
            return Candidate.refused(path, FailureKind.DIRECTORY)
        try:
            fd = safeio.open_regular(host)
        except InputError as exc:
            return Candidate(Verdict.ABSENT, AttemptResult.UNREADABLE, exc.reason)
        try:
            head = os.read(fd, 64)
        except OSError as exc:
            return Candidate(Verdict.ABSENT, AttemptResult.UNREADABLE, exc.strerror or "")
        finally:
            os.close(fd)
        return self._verify_header(path, host, head)

    def _verify_header(self, path: str, host: str, head: bytes) -> Candidate:
        """open_verify's checks of the ELF header, in its order."""
        if len(head) < MIN_HEADER:
            return Candidate.refused(path, FailureKind.FILE_TOO_SHORT)
        if head[:len(ELF_MAGIC)] != ELF_MAGIC:
            kind = FailureKind.GIT_LFS_POINTER if is_git_lfs_pointer(head) else FailureKind.NOT_ELF
            return Candidate.refused(path, kind)
        want_machine, want_class = self.machine
        elf_class = ElfClass.ELFCLASS64.bits if head[EI_CLASS] == ElfClass.ELFCLASS64 else ElfClass.ELFCLASS32.bits
        if elf_class != want_class:
            return Candidate.refused(path, FailureKind.WRONG_CLASS, str(elf_class), Verdict.OTHER_CLASS)
        if head[EI_DATA] != ElfData.ELFDATA2LSB:
            return Candidate.refused(path, FailureKind.WRONG_BYTE_ORDER)
        try:
            header = read_header(head, path)
        except ElfHeaderError:  # a 64-bit header cut short: sizeof(Elf64_Ehdr) is what glibc asks for
            return Candidate.refused(path, FailureKind.FILE_TOO_SHORT)
        if header.machine != want_machine:
            return Candidate(Verdict.OTHER_MACHINE, AttemptResult.WRONG_MACHINE)
        if header.type not in (ET_EXEC, ET_DYN):
            return Candidate.refused(path, FailureKind.NOT_LOADABLE_TYPE)
        return self._verify_program_headers(path, host, header)

    def _verify_program_headers(self, path: str, host: str, header: ElfHeader) -> Candidate:
        """The end of open_verify: program header entries of this class's size, and the table read whole
        (from the first bytes already read, else with pread: an offset past 2**63 is EINVAL)."""
        size = header.program_header_size
        if header.phentsize != size:
            return Candidate.refused(path, FailureKind.BAD_PHENTSIZE)
        file_size = os.stat(host).st_size
        end = header.phoff + header.phnum * size
        if end > file_size and end % (1 << header.bits) > min(file_size, LD_SO_BUFFER):
            einval = header.bits == 64 and header.phoff >= 1 << 63
            return Candidate.refused(path, FailureKind.UNREADABLE_HEADERS, "Invalid argument" if einval else "")
        return Candidate(Verdict.OK)

    # -- paths --------------------------------------------------------------------------------
    def _expand_list(self, dirs: tuple[str, ...], obj: LinkMap | None) -> list[str]:
        return [expanded for expanded in (self.expand(d, obj) for d in dirs) if expanded is not None]

    def expand(self, text: str, obj: LinkMap | None) -> str | None:
        """_dl_dst_substitute: $ORIGIN, $LIB, $PLATFORM (with or without braces); None where a token has
        no value (the entry is dropped)."""
        if "$" not in text:
            return text
        origin = obj.origin if obj is not None else None
        out = text
        for token, value in (("ORIGIN", origin), ("LIB", self.target.lib_token), ("PLATFORM", self.target.platform)):
            for form in ("${" + token + "}", "$" + token):
                if form in out:
                    if value is None:
                        return None
                    out = out.replace(form, value)
        return out

    def origin_of(self, path: str) -> str:
        """$ORIGIN of a library: the directory it was found in, symlinks not resolved (elf/dl-object.c)."""
        return os.path.dirname(self.absolute(path)) or "/"

    def absolute(self, path: str) -> str:
        return path if path.startswith("/") else self.env.cwd.rstrip("/") + "/" + path

    def host(self, path: str) -> str | None:
        return self.target.host_path(self.absolute(path))
