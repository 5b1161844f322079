"""The e_machine and EI_OSABI names `scan` reports (customops.elf.constants, written out since pyelftools was dropped)
against two independent tables: binutils' readelf, on one synthesized header per value and on every fixture, and
glibc's <elf.h>. Where the sources spell or cover a value differently, the difference is listed here."""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest
from test_elf_reader import fixture_elfs

from customops.elf.constants import EM_NAMES, EM_X86_64, OSABI_NAMES

REGISTERED = range(268)  # the gABI registry as far as the table goes; later values are not yet named
UNOFFICIAL = (0x5441, 0x9026)
# values readelf names that the gABI does not (SPARC v9's pre-registration value, two reserved slots) and the
# reverse: gABI values that binutils' readelf does not name (2.40 knows none past 259)
READELF_ONLY = {11, 182, 184}
GABI_ONLY = {133, 143, 206, 207, 208, 209, *range(260, 268)}
# glibc's spelling where it differs from the gABI's: (value, glibc's name)
GLIBC_SPELLING = {(41, "EM_FAKE_ALPHA"), (195, "EM_ARCV2"), (205, "EM_INTELGT"), (212, "EM_EMX16"), (213, "EM_EMX8"),
                  (168, "EM_ECOG1X"), (0, "ELFOSABI_NONE"), (3, "ELFOSABI_GNU")}
ELF_H = Path("/usr/include/elf.h")


def _header(machine: int, osabi: int = 0) -> bytes:
    """A bare little-endian ELF64 ET_DYN header: all that readelf -h needs to name the two fields."""
    ident = b"\x7fELF" + bytes([2, 1, 1, osabi]) + bytes(8)
    return ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, 0, 0, 64, 56, 0, 64, 0, 0)


def _readelf_field(paths: list[Path], field: str) -> list[str]:
    """readelf -h's `field` line for each file, in order (one readelf run for all)."""
    out = subprocess.run(["readelf", "-h", *map(str, paths)], capture_output=True, text=True, check=True).stdout
    found = re.findall(rf"^\s*{field}:\s+(.*)$", out, re.MULTILINE)
    assert len(found) == len(paths)
    return found


def _synthesized(tmp_path: Path, headers: dict[int, bytes], field: str) -> dict[int, str]:
    """readelf's description of `field` for each synthesized header, by value; unknown values left out."""
    paths = []
    for value, header in headers.items():
        paths.append(tmp_path / f"h{value}")
        paths[-1].write_bytes(header)
    described = zip(headers, _readelf_field(paths, field), strict=True)
    return {value: text for value, text in described if "unknown" not in text.lower()}


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    values = [*REGISTERED, *UNOFFICIAL]
    return _synthesized(tmp_path_factory.mktemp("machines"), {v: _header(v) for v in values}, "Machine")


def test_every_machine_readelf_names_is_named_and_no_other(machines):
    assert set(machines) - set(EM_NAMES) <= READELF_ONLY
    assert set(EM_NAMES) - set(machines) <= GABI_ONLY


def test_the_os_abis_readelf_names_for_x86_64_are_named(tmp_path):
    named = _synthesized(tmp_path, {v: _header(EM_X86_64, v) for v in range(256)}, "OS/ABI")
    assert set(named) <= set(OSABI_NAMES)
    # readelf names ARM's, the Cell's and standalone only for their machines; it leaves out 4 (the Hurd, now GNU's 3)
    # and 53 (Sortix)
    assert set(OSABI_NAMES) - set(named) <= {4, 53, 64, 97, 102, 255}


def test_every_fixture_gets_the_machine_and_os_abi_readelf_reads(tree, reader, machines):
    by_description = {text: value for value, text in machines.items()}
    files = fixture_elfs(tree)
    for path, machine, osabi in zip(files, _readelf_field(files, "Machine"), _readelf_field(files, "OS/ABI"),
                                    strict=True):
        info = reader.read(path)
        assert info.machine == EM_NAMES[by_description[machine]], path
        assert info.osabi == {"UNIX - System V": "ELFOSABI_SYSV", "UNIX - GNU": "ELFOSABI_LINUX"}[osabi], path


@pytest.mark.skipif(not ELF_H.is_file(), reason=f"{ELF_H} is not installed (libc6-dev)")
@pytest.mark.parametrize(("prefix", "table"), [("EM_", EM_NAMES), ("ELFOSABI_", OSABI_NAMES)])
def test_names_agree_with_glibc_elf_h(prefix, table):
    defined = re.findall(rf"^#define\s+({prefix}\w+)\s+(\d+|0x[0-9a-fA-F]+)\b", ELF_H.read_text(), re.MULTILINE)
    glibc = {(int(value, 0), name) for name, value in defined
             if name != "EM_NUM" and (int(value, 0) in REGISTERED or prefix != "EM_")}
    ours = {(value, name) for value, name in table.items() if value in {v for v, _ in glibc}}
    assert glibc - ours <= GLIBC_SPELLING
    assert {v for v, _ in glibc} <= set(table)
