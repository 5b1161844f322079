"""Named ELF constants (glibc elf.h and the psABIs), so that no reader spells a magic number."""

from __future__ import annotations

from enum import IntEnum


class ElfClass(IntEnum):
    """e_ident[EI_CLASS]: the word size of the file."""

    ELFCLASS32 = 1
    ELFCLASS64 = 2

    @property
    def bits(self) -> int:
        return 64 if self is ElfClass.ELFCLASS64 else 32


class ElfData(IntEnum):
    """e_ident[EI_DATA]: the byte order of the file."""

    ELFDATA2LSB = 1
    ELFDATA2MSB = 2

    @property
    def byte_order(self) -> str:
        """"little" or "big", as `int.from_bytes` and `sys.byteorder` spell it."""
        return "little" if self is ElfData.ELFDATA2LSB else "big"

    @property
    def endian(self) -> str:
        """The struct and numpy byte-order prefix."""
        return "<" if self is ElfData.ELFDATA2LSB else ">"


# e_ident
ELF_MAGIC = b"\x7fELF"
EI_CLASS, EI_DATA, EI_VERSION, EI_OSABI, EI_NIDENT = 4, 5, 6, 7, 16
ELFCLASS32, ELFCLASS64 = ElfClass.ELFCLASS32, ElfClass.ELFCLASS64
ELFDATA2LSB, ELFDATA2MSB = ElfData.ELFDATA2LSB, ElfData.ELFDATA2MSB

# e_type
ET_NONE, ET_REL, ET_EXEC, ET_DYN, ET_CORE = 0, 1, 2, 3, 4
ET_NAMES = {ET_NONE: "ET_NONE", ET_REL: "ET_REL", ET_EXEC: "ET_EXEC", ET_DYN: "ET_DYN", ET_CORE: "ET_CORE"}

# e_machine values this code names (the full list comes from pyelftools' ENUM_E_MACHINE)
EM_386, EM_S390, EM_ARM, EM_X86_64, EM_AARCH64 = 3, 22, 40, 62, 183
EM_PPC, EM_PPC64, EM_RISCV, EM_LOONGARCH, EM_ALPHA = 20, 21, 243, 258, 0x9026

# sizeof(ElfW(Dyn)) and sizeof(ElfW(Sym)) by word size; DT_GNU_HASH's header (nbuckets, symoffset,
# bloom_size, bloom_shift) and DT_HASH's (nbucket, nchain) in words
DYN_ENTRY_SIZE = {32: 8, 64: 16}
SYM_ENTRY_SIZE = {32: 16, 64: 24}
GNU_HASH_HEADER_WORDS, SYSV_HASH_HEADER_WORDS = 4, 2

# program headers: p_type and p_flags; e_phnum's escape to section 0
PT_NULL, PT_LOAD, PT_DYNAMIC, PT_INTERP = 0, 1, 2, 3
PF_X, PF_W, PF_R = 1, 2, 4
PN_XNUM = 0xFFFF

# section headers: sh_type
SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_DYNSYM = 0, 2, 3, 11

# dynamic tags
DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_HASH, DT_STRTAB, DT_SYMTAB = 0, 1, 2, 4, 5, 6
DT_RELA, DT_RELASZ, DT_RELAENT, DT_STRSZ, DT_SYMENT = 7, 8, 9, 10, 11
DT_SONAME, DT_RPATH, DT_SYMBOLIC, DT_REL, DT_RELSZ, DT_RELENT, DT_PLTREL = 14, 15, 16, 17, 18, 19, 20
DT_TEXTREL, DT_JMPREL, DT_BIND_NOW, DT_RUNPATH, DT_FLAGS = 22, 23, 24, 29, 30
DT_GNU_HASH = 0x6FFFFEF5
DT_VERSYM, DT_FLAGS_1, DT_VERDEF, DT_VERDEFNUM = 0x6FFFFFF0, 0x6FFFFFFB, 0x6FFFFFFC, 0x6FFFFFFD
DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF

# DT_FLAGS and DT_FLAGS_1 bits that change loading
DF_ORIGIN, DF_SYMBOLIC, DF_TEXTREL, DF_BIND_NOW, DF_STATIC_TLS = 0x1, 0x2, 0x4, 0x8, 0x10
DF_1_NOW, DF_1_GLOBAL, DF_1_GROUP, DF_1_NODELETE, DF_1_LOADFLTR = 0x1, 0x2, 0x4, 0x8, 0x10
DF_1_INITFIRST, DF_1_NOOPEN, DF_1_ORIGIN, DF_1_DIRECT, DF_1_INTERPOSE = 0x20, 0x40, 0x80, 0x100, 0x400
DF_1_NODEFLIB, DF_1_NODUMP, DF_1_PIE = 0x800, 0x1000, 0x8000000
FLAG_NAMES = {DF_SYMBOLIC: "SYMBOLIC", DF_BIND_NOW: "BIND_NOW", DF_ORIGIN: "ORIGIN", DF_TEXTREL: "TEXTREL",
              DF_STATIC_TLS: "STATIC_TLS"}
FLAG_1_NAMES = {
    DF_1_NOW: "NOW", DF_1_GLOBAL: "GLOBAL", DF_1_GROUP: "GROUP", DF_1_NODELETE: "NODELETE",
    DF_1_LOADFLTR: "LOADFLTR", DF_1_INITFIRST: "INITFIRST", DF_1_NOOPEN: "NOOPEN", DF_1_ORIGIN: "ORIGIN",
    DF_1_DIRECT: "DIRECT", DF_1_INTERPOSE: "INTERPOSE", DF_1_NODEFLIB: "NODEFLIB", DF_1_NODUMP: "NODUMP",
    DF_1_PIE: "PIE",
}

# symbols: binding, type, visibility, special section indices
STB_LOCAL, STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 0, 1, 2, 10
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 0, 1, 2, 3, 4
STT_COMMON, STT_TLS, STT_GNU_IFUNC = 5, 6, 10
STV_DEFAULT, STV_INTERNAL, STV_HIDDEN, STV_PROTECTED = 0, 1, 2, 3
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
BIND_NAMES = {STB_LOCAL: "LOCAL", STB_GLOBAL: "GLOBAL", STB_WEAK: "WEAK", STB_GNU_UNIQUE: "GNU_UNIQUE"}
TYPE_NAMES = {
    STT_NOTYPE: "NOTYPE", STT_OBJECT: "OBJECT", STT_FUNC: "FUNC", STT_SECTION: "SECTION", STT_FILE: "FILE",
    STT_COMMON: "COMMON", STT_TLS: "TLS", STT_GNU_IFUNC: "IFUNC",
}
VISIBILITY_NAMES = {STV_DEFAULT: "DEFAULT", STV_INTERNAL: "INTERNAL", STV_HIDDEN: "HIDDEN", STV_PROTECTED: "PROTECTED"}

# versions
VER_FLG_BASE, VER_FLG_WEAK = 0x1, 0x2
VERSYM_HIDDEN, VERSYM_INDEX = 0x8000, 0x7FFF

# Relocation classes recorded per undefined symbol: does ld.so need it when the object is loaded,
# or only at the first call through the PLT (lazy binding)?
RELOC_NONE, RELOC_LAZY, RELOC_NOW, RELOC_COPY = 0, 1, 2, 3
RELOC_CLASS_NAMES = {RELOC_NONE: "none", RELOC_LAZY: "lazy", RELOC_NOW: "now", RELOC_COPY: "copy"}

# R_*_JUMP_SLOT per machine: the PLT relocation type that ld.so may bind lazily (psABI constants).
JUMP_SLOT_BY_MACHINE = {EM_386: 7, EM_X86_64: 7, EM_AARCH64: 1026, EM_ARM: 22, EM_PPC: 21, EM_PPC64: 21,
                        EM_S390: 11, EM_RISCV: 5, EM_LOONGARCH: 5}
# R_*_COPY per machine: resolved at load, skipping the executable that holds the copy.
COPY_BY_MACHINE = {EM_386: 5, EM_X86_64: 5, EM_AARCH64: 1024, EM_ARM: 20, EM_PPC: 19, EM_PPC64: 19,
                   EM_S390: 9, EM_RISCV: 4, EM_LOONGARCH: 4}
# Machines whose DT_HASH words are 8 bytes wide in ELFCLASS64 (s390x and Alpha).
WIDE_SYSV_HASH_MACHINES = {EM_S390, EM_ALPHA}
