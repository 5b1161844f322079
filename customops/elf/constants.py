"""Named ELF constants (glibc elf.h and the psABIs), so that no reader spells a magic number."""

from __future__ import annotations

from enum import IntEnum

from customops.textenum import TextEnum


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

# e_machine values this code tests for
EM_386, EM_S390, EM_ARM, EM_X86_64, EM_AARCH64 = 3, 22, 40, 62, 183
EM_PPC, EM_PPC64, EM_RISCV, EM_LOONGARCH, EM_ALPHA = 20, 21, 243, 258, 0x9026

# e_ident[EI_OSABI] and e_machine names, as `scan` reports them: the System V gABI's registry (ch4.eheader and the
# values registered since, up to EM_LOONGGPU = 267), spelled as the gABI spells them, the first where it gives one
# value two names. Beyond it, the two unofficial values Linux toolchains write: 0x5441 (FR-V) and 0x9026 (Alpha
# before its registration as 41). tests/test_elf_names.py holds them to glibc's elf.h and binutils' readelf.
OSABI_NAMES = {
    0: "ELFOSABI_SYSV", 1: "ELFOSABI_HPUX", 2: "ELFOSABI_NETBSD", 3: "ELFOSABI_LINUX", 4: "ELFOSABI_HURD",
    6: "ELFOSABI_SOLARIS", 7: "ELFOSABI_AIX", 8: "ELFOSABI_IRIX", 9: "ELFOSABI_FREEBSD", 10: "ELFOSABI_TRU64",
    11: "ELFOSABI_MODESTO", 12: "ELFOSABI_OPENBSD", 13: "ELFOSABI_OPENVMS", 14: "ELFOSABI_NSK", 15: "ELFOSABI_AROS",
    16: "ELFOSABI_FENIXOS", 17: "ELFOSABI_CLOUD", 18: "ELFOSABI_OPENVOS", 53: "ELFOSABI_SORTIX",
    64: "ELFOSABI_ARM_AEABI", 97: "ELFOSABI_ARM", 102: "ELFOSABI_CELL_LV2", 255: "ELFOSABI_STANDALONE",
}
EM_NAMES = {
    0: "EM_NONE", 1: "EM_M32", 2: "EM_SPARC", 3: "EM_386", 4: "EM_68K", 5: "EM_88K", 6: "EM_IAMCU", 7: "EM_860",
    8: "EM_MIPS", 9: "EM_S370", 10: "EM_MIPS_RS3_LE", 15: "EM_PARISC", 17: "EM_VPP500", 18: "EM_SPARC32PLUS",
    19: "EM_960", 20: "EM_PPC", 21: "EM_PPC64", 22: "EM_S390", 23: "EM_SPU", 36: "EM_V800", 37: "EM_FR20",
    38: "EM_RH32", 39: "EM_RCE", 40: "EM_ARM", 41: "EM_ALPHA", 42: "EM_SH", 43: "EM_SPARCV9", 44: "EM_TRICORE",
    45: "EM_ARC", 46: "EM_H8_300", 47: "EM_H8_300H", 48: "EM_H8S", 49: "EM_H8_500", 50: "EM_IA_64", 51: "EM_MIPS_X",
    52: "EM_COLDFIRE", 53: "EM_68HC12", 54: "EM_MMA", 55: "EM_PCP", 56: "EM_NCPU", 57: "EM_NDR1", 58: "EM_STARCORE",
    59: "EM_ME16", 60: "EM_ST100", 61: "EM_TINYJ", 62: "EM_X86_64", 63: "EM_PDSP", 64: "EM_PDP10", 65: "EM_PDP11",
    66: "EM_FX66", 67: "EM_ST9PLUS", 68: "EM_ST7", 69: "EM_68HC16", 70: "EM_68HC11", 71: "EM_68HC08", 72: "EM_68HC05",
    73: "EM_SVX", 74: "EM_ST19", 75: "EM_VAX", 76: "EM_CRIS", 77: "EM_JAVELIN", 78: "EM_FIREPATH", 79: "EM_ZSP",
    80: "EM_MMIX", 81: "EM_HUANY", 82: "EM_PRISM", 83: "EM_AVR", 84: "EM_FR30", 85: "EM_D10V", 86: "EM_D30V",
    87: "EM_V850", 88: "EM_M32R", 89: "EM_MN10300", 90: "EM_MN10200", 91: "EM_PJ", 92: "EM_OPENRISC",
    93: "EM_ARC_COMPACT", 94: "EM_XTENSA", 95: "EM_VIDEOCORE", 96: "EM_TMM_GPP", 97: "EM_NS32K", 98: "EM_TPC",
    99: "EM_SNP1K", 100: "EM_ST200", 101: "EM_IP2K", 102: "EM_MAX", 103: "EM_CR", 104: "EM_F2MC16", 105: "EM_MSP430",
    106: "EM_BLACKFIN", 107: "EM_SE_C33", 108: "EM_SEP", 109: "EM_ARCA", 110: "EM_UNICORE", 111: "EM_EXCESS",
    112: "EM_DXP", 113: "EM_ALTERA_NIOS2", 114: "EM_CRX", 115: "EM_XGATE", 116: "EM_C166", 117: "EM_M16C",
    118: "EM_DSPIC30F", 119: "EM_CE", 120: "EM_M32C", 131: "EM_TSK3000", 132: "EM_RS08", 133: "EM_SHARC",
    134: "EM_ECOG2", 135: "EM_SCORE7", 136: "EM_DSP24", 137: "EM_VIDEOCORE3", 138: "EM_LATTICEMICO32",
    139: "EM_SE_C17", 140: "EM_TI_C6000", 141: "EM_TI_C2000", 142: "EM_TI_C5500", 143: "EM_TI_ARP32", 144: "EM_TI_PRU",
    160: "EM_MMDSP_PLUS", 161: "EM_CYPRESS_M8C", 162: "EM_R32C", 163: "EM_TRIMEDIA", 164: "EM_QDSP6", 165: "EM_8051",
    166: "EM_STXP7X", 167: "EM_NDS32", 168: "EM_ECOG1", 169: "EM_MAXQ30", 170: "EM_XIMO16", 171: "EM_MANIK",
    172: "EM_CRAYNV2", 173: "EM_RX", 174: "EM_METAG", 175: "EM_MCST_ELBRUS", 176: "EM_ECOG16", 177: "EM_CR16",
    178: "EM_ETPU", 179: "EM_SLE9X", 180: "EM_L10M", 181: "EM_K10M", 183: "EM_AARCH64", 185: "EM_AVR32",
    186: "EM_STM8", 187: "EM_TILE64", 188: "EM_TILEPRO", 189: "EM_MICROBLAZE", 190: "EM_CUDA", 191: "EM_TILEGX",
    192: "EM_CLOUDSHIELD", 193: "EM_COREA_1ST", 194: "EM_COREA_2ND", 195: "EM_ARC_COMPACT2", 196: "EM_OPEN8",
    197: "EM_RL78", 198: "EM_VIDEOCORE5", 199: "EM_78KOR", 200: "EM_56800EX", 201: "EM_BA1", 202: "EM_BA2",
    203: "EM_XCORE", 204: "EM_MCHP_PIC", 205: "EM_INTEL205", 206: "EM_INTEL206", 207: "EM_INTEL207",
    208: "EM_INTEL208", 209: "EM_INTEL209", 210: "EM_KM32", 211: "EM_KMX32", 212: "EM_KMX16", 213: "EM_KMX8",
    214: "EM_KVARC", 215: "EM_CDP", 216: "EM_COGE", 217: "EM_COOL", 218: "EM_NORC", 219: "EM_CSR_KALIMBA",
    220: "EM_Z80", 221: "EM_VISIUM", 222: "EM_FT32", 223: "EM_MOXIE", 224: "EM_AMDGPU", 243: "EM_RISCV",
    244: "EM_LANAI", 245: "EM_CEVA", 246: "EM_CEVA_X2", 247: "EM_BPF", 248: "EM_GRAPHCORE_IPU", 249: "EM_IMG1",
    250: "EM_NFP", 251: "EM_VE", 252: "EM_CSKY", 253: "EM_ARC_COMPACT3_64", 254: "EM_MCS6502", 255: "EM_ARC_COMPACT3",
    256: "EM_KVX", 257: "EM_65816", 258: "EM_LOONGARCH", 259: "EM_KF32", 260: "EM_U16_U8CORE", 261: "EM_TACHYUM",
    262: "EM_56800EF", 263: "EM_SBF", 264: "EM_AIENGINE", 265: "EM_SIMA_MLA", 266: "EM_BANG", 267: "EM_LOONGGPU",
    0x5441: "EM_FRV", 0x9026: "EM_ALPHA",
}

# sizeof(ElfW(Dyn)) and sizeof(ElfW(Sym)) by word size; DT_GNU_HASH's header (nbuckets, symoffset,
# bloom_size, bloom_shift) and DT_HASH's (nbucket, nchain) in words
DYN_ENTRY_SIZE = {32: 8, 64: 16}
SYM_ENTRY_SIZE = {32: 16, 64: 24}
GNU_HASH_HEADER_WORDS, SYSV_HASH_HEADER_WORDS = 4, 2

# program headers: p_type and p_flags; e_phnum's escape to section 0
PT_NULL, PT_LOAD, PT_DYNAMIC, PT_INTERP = 0, 1, 2, 3
PT_GNU_STACK = 0x6474E551
PF_X, PF_W, PF_R = 1, 2, 4
SHT_PROGBITS, SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 0x1, 0x2, 0x4  # elf.h: section type and flags
PN_XNUM = 0xFFFF

# section headers: sh_type
SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_DYNSYM = 0, 2, 3, 11

# dynamic tags
DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_HASH, DT_STRTAB, DT_SYMTAB = 0, 1, 2, 4, 5, 6
DT_RELA, DT_RELASZ, DT_RELAENT, DT_STRSZ, DT_SYMENT = 7, 8, 9, 10, 11
DT_SONAME, DT_RPATH, DT_SYMBOLIC, DT_REL, DT_RELSZ, DT_RELENT, DT_PLTREL = 14, 15, 16, 17, 18, 19, 20
DT_TEXTREL, DT_JMPREL, DT_BIND_NOW, DT_RUNPATH, DT_FLAGS = 22, 23, 24, 29, 30
DT_INIT, DT_INIT_ARRAY, DT_INIT_ARRAYSZ, DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ = 12, 25, 27, 32, 33
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


class SymbolBind(TextEnum):
    """A symbol's binding (ELF64_ST_BIND), as readelf names it. The parse keeps the numbers (numpy arrays):
    a record names them through SYMBOL_BINDS, and one elf.h does not name stays its number."""

    LOCAL = "LOCAL"
    GLOBAL = "GLOBAL"
    WEAK = "WEAK"
    GNU_UNIQUE = "GNU_UNIQUE"


class SymbolType(TextEnum):
    """A symbol's type (ELF64_ST_TYPE), as readelf names it."""

    NOTYPE = "NOTYPE"
    OBJECT = "OBJECT"
    FUNC = "FUNC"
    SECTION = "SECTION"
    FILE = "FILE"
    COMMON = "COMMON"
    TLS = "TLS"
    IFUNC = "IFUNC"


class SymbolVisibility(TextEnum):
    """A symbol's visibility (ELF64_ST_VISIBILITY: two bits, every value named)."""

    DEFAULT = "DEFAULT"
    INTERNAL = "INTERNAL"
    HIDDEN = "HIDDEN"
    PROTECTED = "PROTECTED"


SYMBOL_BINDS = {STB_LOCAL: SymbolBind.LOCAL, STB_GLOBAL: SymbolBind.GLOBAL, STB_WEAK: SymbolBind.WEAK,
                STB_GNU_UNIQUE: SymbolBind.GNU_UNIQUE}
SYMBOL_TYPES = {
    STT_NOTYPE: SymbolType.NOTYPE, STT_OBJECT: SymbolType.OBJECT, STT_FUNC: SymbolType.FUNC,
    STT_SECTION: SymbolType.SECTION, STT_FILE: SymbolType.FILE, STT_COMMON: SymbolType.COMMON,
    STT_TLS: SymbolType.TLS, STT_GNU_IFUNC: SymbolType.IFUNC,
}
SYMBOL_VISIBILITIES = (SymbolVisibility.DEFAULT, SymbolVisibility.INTERNAL, SymbolVisibility.HIDDEN,
                       SymbolVisibility.PROTECTED)  # indexed by STV_*

# versions
VER_FLG_BASE, VER_FLG_WEAK = 0x1, 0x2
VERSYM_HIDDEN, VERSYM_INDEX = 0x8000, 0x7FFF

# Relocation classes recorded per undefined symbol: does ld.so need it when the object is loaded,
# or only at the first call through the PLT (lazy binding)? Numbers in the parse and its cache (one byte
# per symbol); a Relocation in the records made from them.
RELOC_NONE, RELOC_LAZY, RELOC_NOW, RELOC_COPY = 0, 1, 2, 3


class Relocation(TextEnum):
    """How a symbol's relocations bind it: not at all, lazily at the first call, at load, or by copy."""

    NONE = "none"
    LAZY = "lazy"
    NOW = "now"
    COPY = "copy"


RELOCATIONS = (Relocation.NONE, Relocation.LAZY, Relocation.NOW, Relocation.COPY)  # indexed by RELOC_*

# R_*_JUMP_SLOT per machine: the PLT relocation type that ld.so may bind lazily (psABI constants).
JUMP_SLOT_BY_MACHINE = {EM_386: 7, EM_X86_64: 7, EM_AARCH64: 1026, EM_ARM: 22, EM_PPC: 21, EM_PPC64: 21,
                        EM_S390: 11, EM_RISCV: 5, EM_LOONGARCH: 5}
# R_*_COPY per machine: resolved at load, skipping the executable that holds the copy.
COPY_BY_MACHINE = {EM_386: 5, EM_X86_64: 5, EM_AARCH64: 1024, EM_ARM: 20, EM_PPC: 19, EM_PPC64: 19,
                   EM_S390: 9, EM_RISCV: 4, EM_LOONGARCH: 4}
# Machines whose DT_HASH words are 8 bytes wide in ELFCLASS64 (s390x and Alpha).
WIDE_SYSV_HASH_MACHINES = {EM_S390, EM_ALPHA}
