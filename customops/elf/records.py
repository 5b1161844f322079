"""What the parser hands out: ElfInfo and the version records it holds, as the dynamic linker sees them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from customops.elf.constants import (
    DF_1_NODEFLIB,
    DF_1_NOOPEN,
    DF_1_NOW,
    DF_BIND_NOW,
    DF_SYMBOLIC,
    EM_386,
    EM_NAMES,
    EM_X86_64,
    ET_NAMES,
    FLAG_1_NAMES,
    FLAG_NAMES,
    OSABI_NAMES,
    PF_X,
    VER_FLG_BASE,
    VER_FLG_WEAK,
    VERSYM_HIDDEN,
    VERSYM_INDEX,
)

if TYPE_CHECKING:
    from customops.elf.symbols import SymbolTable

# glibc's DEFAULT_STACK_PERMS (sysdeps/<machine>/stackinfo.h) has PF_X here: an object without PT_GNU_STACK
# needs an executable stack (AArch64's default is PF_R|PF_W)
EXECUTABLE_STACK_BY_DEFAULT = frozenset({EM_386, EM_X86_64})


@dataclass(frozen=True)
class FileIdentity:
    """What the cache keys on: a file is unchanged while these are. The mtime alone is not enough (anyone who
    can write the file can set it back after rewriting it in place); the ctime no user can set."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int = 0

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class VersionDefinition:
    """One `.gnu.version_d` entry: the index used in versym, and its name (then its parents)."""

    index: int
    flags: int
    hash: int
    names: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.names[0] if self.names else ""

    @property
    def is_base(self) -> bool:
        return bool(self.flags & VER_FLG_BASE)


@dataclass(frozen=True)
class VersionRequirement:
    """One `.gnu.version_r` aux entry: a version this object needs from one file."""

    name: str
    index: int
    flags: int
    hash: int

    @property
    def is_weak(self) -> bool:
        return bool(self.flags & VER_FLG_WEAK)


@dataclass(frozen=True)
class VersionNeed:
    file: str
    versions: tuple[VersionRequirement, ...]


@dataclass(frozen=True)
class VersionSlot:
    """ld.so's `l_versions[ndx]`: what a versym index means in this object."""

    name: str
    hash: int
    hidden: bool
    filename: str | None  # the file named in the verneed entry, None for own definitions


@dataclass(frozen=True)
class TableLayout:
    """Where the loader-visible tables lie in the file; enough to rebuild views without re-parsing."""

    symtab_offset: int
    symbol_count: int
    strtab_offset: int
    strtab_size: int
    versym_offset: int | None
    gnu_hash_offset: int | None
    sysv_hash_offset: int | None


@dataclass(frozen=True)
class ElfInfo:
    """Everything customops needs to know about one ELF file, as the dynamic linker sees it."""

    path: str
    identity: FileIdentity
    elf_class: int  # 32 or 64
    byte_order: str  # "little" or "big"
    machine_code: int
    type_code: int  # e_type
    osabi_code: int
    interpreter: str | None
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    flags: int
    flags_1: int
    version_definitions: tuple[VersionDefinition, ...]
    version_needs: tuple[VersionNeed, ...]
    has_section_headers: bool
    has_symtab: bool
    layout: TableLayout
    stack_flags: int | None  # p_flags of PT_GNU_STACK; None without one (the machine's default applies)
    symbols: SymbolTable = field(repr=False, compare=False)

    @property
    def machine(self) -> str:
        return EM_NAMES.get(self.machine_code, f"EM_{self.machine_code}")

    @property
    def elf_type(self) -> str:
        return ET_NAMES.get(self.type_code, f"ET_{self.type_code:#x}")

    @property
    def osabi(self) -> str:
        return OSABI_NAMES.get(self.osabi_code, f"OSABI_{self.osabi_code}")

    @property
    def flag_names(self) -> tuple[str, ...]:
        return _bit_names(self.flags, FLAG_NAMES)

    @property
    def flag_1_names(self) -> tuple[str, ...]:
        return _bit_names(self.flags_1, FLAG_1_NAMES)

    @property
    def binds_now(self) -> bool:
        """-z now: every relocation is processed at load, lazy binding is off for this object."""
        return bool(self.flags & DF_BIND_NOW or self.flags_1 & DF_1_NOW)

    @property
    def needs_executable_stack(self) -> bool:
        """ld.so must make the stack executable for it (glibc elf/dl-load.c _dl_map_object_from_fd): PF_X in
        its PT_GNU_STACK, or no PT_GNU_STACK where the machine's default stack is executable."""
        if self.stack_flags is None:
            return self.machine_code in EXECUTABLE_STACK_BY_DEFAULT
        return bool(self.stack_flags & PF_X)

    @property
    def symbolic(self) -> bool:
        return bool(self.flags & DF_SYMBOLIC)

    @property
    def nodeflib(self) -> bool:
        return bool(self.flags_1 & DF_1_NODEFLIB)

    @property
    def noopen(self) -> bool:
        return bool(self.flags_1 & DF_1_NOOPEN)

    @cached_property
    def version_slots(self) -> dict[int, VersionSlot]:
        """ld.so's l_versions: versym index -> version, from both verdef and verneed entries."""
        slots: dict[int, VersionSlot] = {}
        for definition in self.version_definitions:
            if not definition.is_base:  # "The name of the base version should not be available for matching"
                slots[definition.index] = VersionSlot(definition.name, definition.hash, False, None)
        for need in self.version_needs:
            for req in need.versions:
                slots[req.index & VERSYM_INDEX] = VersionSlot(
                    req.name, req.hash, bool(req.index & VERSYM_HIDDEN), need.file
                )
        return slots

    @property
    def defined_count(self) -> int:
        return self.symbols.defined_count

    @property
    def undefined_count(self) -> int:
        return self.symbols.undefined_count


def _bit_names(value: int, names: dict[int, str]) -> tuple[str, ...]:
    return tuple(name for bit, name in names.items() if value & bit)
