"""Which dynamic symbols a file's relocations reference, and how: needed when the object is loaded, or
only through the PLT (lazy binding). _dl_relocate_object (glibc elf/dl-reloc.c) processes DT_REL/DT_RELA
first, then DT_JMPREL; the first relocation of an undefined symbol decides which one an error names."""

from __future__ import annotations

import numpy as np

from customops.elf.constants import (
    COPY_BY_MACHINE,
    DT_JMPREL,
    DT_PLTREL,
    DT_PLTRELSZ,
    DT_REL,
    DT_RELA,
    DT_RELASZ,
    DT_RELSZ,
    JUMP_SLOT_BY_MACHINE,
    RELOC_COPY,
    RELOC_LAZY,
    RELOC_NONE,
    RELOC_NOW,
)
from customops.elf.image import RELOCATION_TABLE, FileImage

NO_RELOCATION = 0xFFFFFFFF  # reloc_first of a symbol no relocation names


def rel_entsize(elf_class: int, is_rela: bool) -> int:
    """sizeof(ElfW(Rel)) or sizeof(ElfW(Rela))."""
    if elf_class == 64:
        return 24 if is_rela else 16
    return 12 if is_rela else 8


def plt_range(dynamic: dict[int, int]) -> tuple[int, int] | None:
    """The [start, end) addresses of DT_JMPREL, or None when there is none."""
    if DT_JMPREL in dynamic and dynamic.get(DT_PLTRELSZ):
        return dynamic[DT_JMPREL], dynamic[DT_JMPREL] + dynamic[DT_PLTRELSZ]
    return None


def relocation_classes(image: FileImage, dynamic: dict[int, int], count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per symbol: its class (RELOC_NONE, _LAZY, _NOW, _COPY) and the position of its first relocation in
    the order ld.so processes them (NO_RELOCATION when none names it)."""
    classes = np.zeros(count, dtype=np.uint8)
    first = np.full(count, NO_RELOCATION, dtype=np.uint32)
    if not count:
        return classes, first
    tables = relocation_tables(dynamic)
    plt = tables.pop() if plt_range(dynamic) else None
    position = 0
    for start, size, is_rela in tables:
        if size:
            position += _classify_eager(image, _rel_info(image, start, size, is_rela), classes, first, position)
    if plt:
        _classify_plt(image, _rel_info(image, *plt), classes, first, position)
    return classes, first


def relocation_tables(dynamic: dict[int, int]) -> list[tuple[int, int, bool]]:
    """(address, size, RELA) of each table ld.so processes, in its order: DT_REL, DT_RELA (stopping where the
    PLT's begins when it covers it too: some linkers make DT_RELA cover .rela.plt, which ld.so does not
    process twice), then DT_JMPREL."""
    plt_span = plt_range(dynamic)
    plt = None if plt_span is None else (plt_span[0], plt_span[1] - plt_span[0],
                                         dynamic.get(DT_PLTREL, DT_RELA) == DT_RELA)
    tables = [(dynamic[tag], dynamic[size_tag], is_rela) for tag, size_tag, is_rela in
              ((DT_REL, DT_RELSZ, False), (DT_RELA, DT_RELASZ, True)) if tag in dynamic and dynamic.get(size_tag)]
    if plt is None:
        return tables
    return [(start, max(0, plt[0] - start) if start < plt[0] + plt[1] and plt[0] < start + size else size, is_rela)
            for start, size, is_rela in tables] + [plt]


def check_relocation_tables(image: FileImage, dynamic: dict[int, int], count: int) -> None:
    """What `relocation_classes` checks of the tables (each lies inside the file and its loaded segments, or
    an ElfError), without the pass over their entries: a reader that skips the pass (resolve --tree-only)
    refuses the same files."""
    if not count:
        return
    for start, size, is_rela in relocation_tables(dynamic):
        if size:
            table_at(image, start, size, is_rela)


def table_at(image: FileImage, vaddr: int, size: int, is_rela: bool) -> tuple[int, int, int]:
    """A relocation table's file offset, entry count and entry size; an ElfError when its entries do not lie
    inside the file and its loaded segments."""
    entsize = rel_entsize(image.elf_class, is_rela)
    n = size // entsize
    return image.offset_of(vaddr, n * entsize, RELOCATION_TABLE), n, entsize


def named_extent(image: FileImage, dynamic: dict[int, int]) -> int:
    """One past the highest symbol index a relocation names: how far the dynamic symbol table reaches for
    ld.so, which resolves what relocations name and never counts the table. DT_GNU_HASH cannot tell it for
    a library that exports nothing (its symoffset may then be 1, below every import)."""
    top = 0
    plt = plt_range(dynamic)
    tables = [(dynamic[tag], dynamic[size_tag], is_rela) for tag, size_tag, is_rela in
              ((DT_REL, DT_RELSZ, False), (DT_RELA, DT_RELASZ, True)) if tag in dynamic and dynamic.get(size_tag)]
    if plt:
        tables.append((plt[0], plt[1] - plt[0], dynamic.get(DT_PLTREL, DT_RELA) == DT_RELA))
    for start, size, is_rela in tables:
        syms, _ = _split_info(image, _rel_info(image, start, size, is_rela))
        if len(syms):
            top = max(top, int(syms.max()) + 1)
    return top


def _split_info(image: FileImage, info: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ELF64_R_SYM/ELF64_R_TYPE (or the ELF32_ forms) of r_info."""
    shift, mask = (32, 0xFFFFFFFF) if image.elf_class == 64 else (8, 0xFF)
    return info >> shift, info & mask


def _classify_eager(image: FileImage, info: np.ndarray, classes: np.ndarray, first: np.ndarray,
                    position: int) -> int:
    """DT_REL/DT_RELA: every symbol named is needed at load (R_*_COPY ones as copies); returns the count."""
    syms, types = _split_info(image, info)
    used = np.flatnonzero((syms > 0) & (syms < len(classes)))
    classes[syms[used]] = RELOC_NOW
    copy_type = COPY_BY_MACHINE.get(image.machine)
    if copy_type is not None:
        copies = used[types[used] == copy_type]
        classes[syms[copies]] = RELOC_COPY
    np.minimum.at(first, syms[used].astype(np.intp), (used + position).astype(np.uint32))
    return len(info)


def _classify_plt(image: FileImage, info: np.ndarray, classes: np.ndarray, first: np.ndarray,
                  position: int) -> None:
    """DT_JMPREL: R_*_JUMP_SLOT entries bind lazily (unless something else needs the symbol at load)."""
    syms, types = _split_info(image, info)
    valid = (syms > 0) & (syms < len(classes))
    jump_slot = JUMP_SLOT_BY_MACHINE.get(image.machine)
    lazy = valid if jump_slot is None else valid & (types == jump_slot)
    lazy_syms = syms[lazy]
    classes[lazy_syms[classes[lazy_syms] == RELOC_NONE]] = RELOC_LAZY
    classes[syms[valid & ~lazy]] = RELOC_NOW
    idx = np.flatnonzero(valid)
    np.minimum.at(first, syms[idx].astype(np.intp), (idx + position).astype(np.uint32))


def _rel_info(image: FileImage, vaddr: int, size: int, is_rela: bool) -> np.ndarray:
    """The r_info column of a relocation table, as uint64."""
    off, n, entsize = table_at(image, vaddr, size, is_rela)
    word, wsize = ("u8", 8) if image.elf_class == 64 else ("u4", 4)
    table = np.frombuffer(image.data, image.endian + word, n * (entsize // wsize), off).reshape(n, -1)
    return table[:, 1].astype(np.uint64)
