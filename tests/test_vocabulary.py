"""Every typed vocabulary keeps the text its values had as strings: reports, JSON and f-strings show the same
words, and the text parses back to the member."""

from __future__ import annotations

import json

import pytest

from customops.app.suppressions import DirectiveKind
from customops.elf.constants import (
    RELOC_COPY,
    RELOC_LAZY,
    RELOC_NONE,
    RELOC_NOW,
    RELOCATIONS,
    STB_GNU_UNIQUE,
    STT_GNU_IFUNC,
    STV_PROTECTED,
    SYMBOL_BINDS,
    SYMBOL_TYPES,
    SYMBOL_VISIBILITIES,
    Relocation,
    SymbolBind,
    SymbolType,
    SymbolVisibility,
)
from customops.findings import SuppressedBy
from customops.inspect.registrations import FoundIn
from customops.linker.types import (
    AttemptResult,
    BindingReason,
    CallStatus,
    FailureKind,
    SearchAttempt,
    StepKind,
    StepStatus,
)
from customops.textenum import TextEnum
from customops.triton.container import ContainerFacts, FactsFrom
from customops.triton.plan import LoadedBy, Purpose

# The strings each vocabulary was spelled with before it was typed
TEXTS: dict[type[TextEnum], set[str]] = {
    Purpose: {"backend library", "op library", "plugin library", "preload", "extension module"},
    LoadedBy: {"tensorflow", "onnxruntime", "pytorch", "tensorrt", "python", "backend", "host"},
    AttemptResult: {"found", "not found", "unreadable", "refused", "wrong machine, skipped", "not in cache",
                    "skipped: loader has DF_1_NODEFLIB"},
    Relocation: {"none", "lazy", "now", "copy"},
    BindingReason: {"", "protected", "-Bsymbolic", "GNU_UNIQUE: the first definition loaded in the process wins",
                    "copy relocation: the executable holds the object and every reference binds to it"},
    SymbolBind: {"LOCAL", "GLOBAL", "WEAK", "GNU_UNIQUE"},
    SymbolType: {"NOTYPE", "OBJECT", "FUNC", "SECTION", "FILE", "COMMON", "TLS", "IFUNC"},
    SymbolVisibility: {"DEFAULT", "INTERNAL", "HIDDEN", "PROTECTED"},
    FactsFrom: {"root", "profile", "release"},
    SuppressedBy: {"manifest", "config"},
    FoundIn: {"symtab", "dynsym", "rodata", "static"},
    DirectiveKind: {"line", "file"},
    StepKind: {"startup", "preload", "dlopen"},
    StepStatus: {"loaded", "failed", "ignored", "fatal", "crash"},
    CallStatus: {"ok", "not found"},
}


@pytest.mark.parametrize("vocabulary", TEXTS, ids=lambda v: v.__name__)
def test_every_member_is_its_old_text_and_parses_back(vocabulary):
    assert {member.value for member in vocabulary} == TEXTS[vocabulary]
    for member in vocabulary:
        text = member.value
        assert vocabulary(text) is member
        assert str(member) == f"{member}" == format(member) == text
        assert f"{member:>20}" == f"{text:>20}"
        assert json.dumps({"k": member}) == json.dumps({"k": text})
        assert member == text and hash(member) == hash(text)  # a dict keyed by the text finds the member


def test_failure_kinds_render_as_their_text():
    for kind in FailureKind:
        assert str(kind) == f"{kind}" == kind.value and FailureKind(kind.value) is kind


def test_the_elf_tables_name_each_number_as_readelf_does():
    assert [RELOCATIONS[c] for c in (RELOC_NONE, RELOC_LAZY, RELOC_NOW, RELOC_COPY)] == list(Relocation)
    assert SYMBOL_BINDS[STB_GNU_UNIQUE] is SymbolBind.GNU_UNIQUE and SYMBOL_TYPES[STT_GNU_IFUNC] is SymbolType.IFUNC
    assert SYMBOL_VISIBILITIES[STV_PROTECTED] is SymbolVisibility.PROTECTED
    assert str(SYMBOL_BINDS.get(5, 5)) == "5"  # a number elf.h does not name is shown as the number


def test_a_search_attempt_shows_its_reason_where_it_has_one():
    assert SearchAttempt("LD_LIBRARY_PATH", "/x/liba.so", AttemptResult.FOUND).text == "found"
    assert SearchAttempt("ld.so.cache", "/x/liba.so", AttemptResult.REFUSED,
                         "wrong ELF class: ELFCLASS32").text == "wrong ELF class: ELFCLASS32"
    assert SearchAttempt("RPATH of x", "/x/liba.so", AttemptResult.UNREADABLE).text == "unreadable"


def test_container_facts_keep_their_json_keys_in_their_order():
    record = ContainerFacts(known_from=FactsFrom.RELEASE).record()
    assert list(record) == ["triton_version", "backends", "absent_backends", "tensorrt", "onnxruntime", "tensorflow",
                            "pytorch", "cuda", "libpython", "glibc", "glibcxx", "cxxabi", "source", "missing"]
    assert type(record["source"]) is str and record["source"] == "release"
