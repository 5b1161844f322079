"""Which functions a library's constructors call, followed through its own x86-64 code: a recursive
traversal from each constructor (elf.constructors) over direct calls and jumps, through the PLT (a stub's
`jmp *GOT(%rip)` names the symbol its slot's relocation binds) and `call *GOT(%rip)`, into the library's own
definitions where the caller says a symbol binds there. An indirect call or jump through a register or memory
the traversal cannot follow makes the answer undecided, and so does its bound on the work (a hostile library
cannot make it run long). Decoding is capstone's, imported only when a library needs it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from customops.elf.constructors import CodeImage, Constructor

MAX_INSTRUCTIONS = 200_000  # decoded per library; past it, what was not reached is undecided
MAX_DEPTH = 200  # nested calls followed
WINDOW = 4096  # bytes decoded at a time
ENDS = frozenset({"ret", "retf", "retfq", "hlt", "ud2", "int3", "iret", "iretq", "sysret", "jmp", "ljmp"})
BRANCHES = frozenset({"jo", "jno", "jb", "jae", "je", "jne", "jbe", "ja", "js", "jns", "jp", "jnp", "jl", "jge",
                      "jle", "jg", "jrcxz", "jecxz", "loop", "loope", "loopne"})
PREFIXES = ("bnd ", "notrack ", "rep ", "repz ", "repne ")
IMMEDIATE = re.compile(r"^0x([0-9a-f]+)$")
RIP_SLOT = re.compile(r"^qword ptr \[rip ([+-]) 0x([0-9a-f]+)\]$")
LOAD_SLOT = re.compile(r"^(\w+), qword ptr \[rip ([+-]) 0x([0-9a-f]+)\]$")
REGISTER = re.compile(r"^([a-z][a-z0-9]*)$")
WRITTEN = re.compile(r"^([a-z][a-z0-9]*),")
READ_ONLY = frozenset({"test", "cmp", "bt", "push"})  # a first operand these do not write


class Reached(NamedTuple):
    """A symbol a constructor calls, the first time the traversal reaches it, and the functions on the way."""

    symbol: bytes
    constructor: Constructor
    chain: tuple[str, ...]  # the constructor's name (its symbol's), then each function called on the way


@dataclass(frozen=True)
class Reach:
    """Every symbol outside the library's own code its constructors call, first reached first (DT_INIT before
    the DT_INIT_ARRAY entries, in order; each function depth first in program order); `undecided` says why
    more may be called than these ("" when every call was followed)."""

    calls: tuple[Reached, ...]
    undecided: str = ""


def reach(code: CodeImage, follow: Callable[[bytes], int | None], budget: int = MAX_INSTRUCTIONS) -> Reach:
    """The symbols `code`'s constructors call. `follow(symbol)` is the address of the library's own definition
    the symbol binds to in the modelled process (the traversal goes on into it), or None (it binds elsewhere,
    or nowhere: a call recorded)."""
    if not code.constructors:
        return Reach(())
    if not code.decodable:
        return Reach((), f"{code.path}'s code (machine {code.machine}) is not decoded")
    walk = _Walk(code, follow, budget)
    for constructor in code.constructors:
        if not walk.function(constructor.address, constructor, ()):
            break
    return Reach(tuple(walk.calls), walk.undecided)


@dataclass
class _Walk:
    code: CodeImage
    follow: Callable[[bytes], int | None]
    budget: int
    calls: list[Reached] = field(default_factory=list)
    undecided: str = ""
    _seen_symbols: set[bytes] = field(default_factory=set)
    _visited: set[int] = field(default_factory=set)
    _decoder: object = None

    def function(self, address: int, constructor: Constructor, chain: tuple[int, ...]) -> bool:
        """Walk the function at `address` and everything it calls; False once the bound is spent."""
        chain = (*chain, address)
        if len(chain) > MAX_DEPTH:
            return self._undecide(f"calls nest deeper than {MAX_DEPTH} in {self.code.name(chain[0])}")
        blocks: list[tuple[int, dict[str, bytes]]] = [(address, {})]
        while blocks:
            start, registers = blocks.pop()
            if start not in self._visited and not self._block(start, registers, blocks, constructor, chain):
                return False
        return True

    def _block(self, start: int, registers: dict[str, bytes], blocks: list, constructor: Constructor,
               chain: tuple[int, ...]) -> bool:
        """Decode from `start` to the block's end, following each call as it is met."""
        address = start
        stop = self.code.next_function(start)
        entering = start == chain[-1]  # no instruction but endbr64 yet at the function's entry
        while True:
            limit = WINDOW if stop is None else min(WINDOW, stop - address)
            data = self.code.code_at(address, limit) if limit > 0 else b""
            if not data:
                if address == start:
                    self._undecide(f"{self.code.name(chain[-1])} jumps to {address:#x}, outside the library's code")
                return True
            decoded = 0
            for at, size, mnemonic, operands in self._disasm(data, address):
                if at != start and at in self._visited:
                    return True
                self._visited.add(at)
                decoded += size
                self.budget -= 1
                if self.budget < 0:
                    return self._undecide("the library's code is larger than the traversal's bound")
                stub = entering and len(chain) > 1  # a PLT stub's jump: its caller calls the symbol
                entering = entering and mnemonic == "endbr64"
                ended = self._instruction(mnemonic, operands, at + size, registers, blocks, constructor,
                                          chain[:-1] if stub else chain)
                if ended is not None:
                    return ended
            if not decoded:  # what stopped the decoder is no instruction (a window's end only cuts one)
                self._undecide(f"undecodable bytes at {address:#x} in {self.code.name(chain[-1])}")
                return True
            address += decoded

    def _instruction(self, mnemonic: str, operands: str, after: int, registers: dict[str, bytes], blocks: list,
                     constructor: Constructor, chain: tuple[int, ...]) -> bool | None:
        """One instruction's effect: None to go on with the block, else whether the walk goes on."""
        for prefix in PREFIXES:
            if mnemonic.startswith(prefix):
                mnemonic = mnemonic[len(prefix):]
        if mnemonic in ("call", "jmp"):
            direct = IMMEDIATE.match(operands)
            if direct and mnemonic == "jmp":
                blocks.append((int(direct.group(1), 16), dict(registers)))
                return True
            if direct:
                if not self.function(int(direct.group(1), 16), constructor, chain):
                    return False
            else:
                symbol = self._symbol(operands, after, registers)
                if symbol is None:
                    self._undecide(f"{self.code.name(chain[-1])} makes an indirect {mnemonic} ({mnemonic} {operands})")
                elif not self._call(symbol, constructor, chain):
                    return False
            return True if mnemonic == "jmp" else None
        if mnemonic in ENDS:
            return True
        if mnemonic in BRANCHES:
            target = IMMEDIATE.match(operands)
            if target:
                blocks.append((int(target.group(1), 16), dict(registers)))
            return None
        self._track(mnemonic, operands, after, registers)
        return None

    def _symbol(self, operands: str, after: int, registers: dict[str, bytes]) -> bytes | None:
        """The symbol an indirect call goes to: a GOT slot's (`*GOT(%rip)`), or a register's loaded from one."""
        slot = RIP_SLOT.match(operands)
        if slot:
            return self.code.slots.get(_relative(after, slot.group(1), slot.group(2)))
        register = REGISTER.match(operands)
        return registers.get(register.group(1)) if register else None

    def _track(self, mnemonic: str, operands: str, after: int, registers: dict[str, bytes]) -> None:
        """`mov REG, [rip + GOT]` loads a symbol's address (crt's `call *%rax` after testing __gmon_start__);
        any other write to the register forgets it."""
        loaded = LOAD_SLOT.match(operands) if mnemonic == "mov" else None
        symbol = self.code.slots.get(_relative(after, loaded.group(2), loaded.group(3))) if loaded else None
        if loaded and symbol is not None:
            registers[loaded.group(1)] = symbol
            return
        written = WRITTEN.match(operands)
        if written and registers and mnemonic not in READ_ONLY:
            registers.pop(written.group(1), None)

    def _call(self, symbol: bytes, constructor: Constructor, chain: tuple[int, ...]) -> bool:
        own = self.follow(symbol)
        if own is not None:
            return own in self._visited or self.function(own, constructor, chain)
        if symbol not in self._seen_symbols:
            self._seen_symbols.add(symbol)
            self.calls.append(Reached(symbol, constructor, tuple(self.code.name(a) for a in chain)))
        return True

    def _undecide(self, reason: str) -> bool:
        if not self.undecided:
            self.undecided = reason
        return self.budget >= 0

    def _disasm(self, data: bytes, address: int):
        if self._decoder is None:
            import capstone  # only a library that needs its constructors decoded pays for the import

            self._decoder = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        return self._decoder.disasm_lite(data, address)  # type: ignore[attr-defined]


def _relative(after: int, sign: str, offset: str) -> int:
    return after + int(offset, 16) if sign == "+" else after - int(offset, 16)
