"""What a library registers with its framework, read statically (no code runs), with a confidence.

- Torch: TORCH_LIBRARY / TORCH_LIBRARY_FRAGMENT / TORCH_LIBRARY_IMPL blocks, and their stable-ABI forms
  STABLE_TORCH_LIBRARY* (torch/csrc/stable/library.h), leave local symbols in `.symtab`
  (`TORCH_LIBRARY_init_<ns>`, `TORCH_LIBRARY_static_init_<ns>`, `..._FRAGMENT_..._<ns>_<n>`,
  `..._IMPL_..._<ns>_<DispatchKey>_<n>`, each also with the prefix `STABLE_`); names are found in the raw
  `.strtab` and demangled. Exact while `.symtab` is there; stripping removes them (the macros' static
  initialisers are local symbols). What a stripped library still carries:
  - its imports in `.dynsym`: the registration API it calls (torch::Library's constructor and `_def`, or
    the stable C shims `aoti_torch_library_init_{def,fragment,impl}` and `aoti_torch_library_def`), so
    whether it registers, and whether it defines schemas (loading it twice then aborts); the namespace is
    an argument, not a symbol;
  - schema strings (`op(Tensor x) -> Tensor`, `ns::op.overload(...) -> ...`) in its read-only data: the
    stable ABI passes each as a C string literal, so they are there whole; torch::Library's `def` takes a
    std::string that g++ may build from immediates at -O2, so there they may be missing (never invented);
  - what it does when torch refuses one of its schemas (refused_def): torch::Library's def throws; the stable
    shim returns an error code, which StableLibrary::def checks (and throws) only when built with torch 2.13's
    headers or later, whose check leaves the call's text in the read-only data.
- ONNX Runtime: the `RegisterCustomOps` export ORT dlsym()s (exact).
- TensorRT: imports of `getPluginRegistry` or the TensorRT 10 plugin-library exports (`getCreators`,
  `getPluginCreators`, `setLoggerFinder`) mark a plugin library; creator names are not readable statically.
- TensorFlow: references to the op registry (`OpDefBuilderWrapper`, `OpRegistry`) mark an op library; op
  names are not reliably readable statically (schema strings are split at -O2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from customops.elf.demangle import demangle
from customops.elf.records import ElfInfo
from customops.frameworks import ONNXRUNTIME, PYTORCH, TENSORFLOW, TENSORRT
from customops.textenum import TextEnum

TORCH_BLOCK = re.compile(r"\b(STABLE_)?TORCH_LIBRARY(?:_(FRAGMENT|IMPL))?_(?:static_)?init_(\w+)")
# An op schema as torch parses it (FunctionSchema): [ns::]name[.overload](arguments) -> returns
TORCH_SCHEMA = re.compile(rb"(?:([A-Za-z_]\w*)::)?([A-Za-z_]\w*)(?:\.(\w+))?\(([^()]|\([^()]*\))*\) -> \S.*")
# Imports that mark a Torch op library: the classic API (libtorch_cpu) and the stable C shims
TORCH_REGISTERS = (b"5torch7LibraryC1E", b"5torch7LibraryC2E", b"aoti_torch_library_init_def",
                   b"aoti_torch_library_init_fragment", b"aoti_torch_library_init_impl")
CLASSIC_DEFINES = b"5torch7Library4_def"  # torch::Library::_def: a refused schema throws c10::Error
TORCH_DEFINES = (CLASSIC_DEFINES, b"aoti_torch_library_def", b"torch_library_def_with_tags")
STABLE_SHIMS = (b"aoti_torch_library_init_def", b"aoti_torch_library_init_fragment", b"aoti_torch_library_init_impl")
TRT_PLUGIN_EXPORTS = (b"getCreators", b"getPluginCreators", b"setLoggerFinder")
# References to TensorFlow's op registry that mark an op library (any symbol containing one)
TF_REGISTERS = (b"OpDefBuilderWrapper", b"10tensorflow11OpRegistry", b"10tensorflow10RegisterOp")
ORT_ENTRY_POINTS = frozenset(e.encode() for e in ONNXRUNTIME.entry_points)  # what ONNX Runtime dlsym()s
# The text of torch's check of a stable def() call: STABLE_TORCH_ERROR_CODE_CHECK and TORCH_ERROR_CODE_CHECK pass
# the call's source (#call) to the function that throws; StableLibrary::def has it from torch 2.13's headers on
STABLE_DEF_CHECK = re.compile(rb"\b(?:aoti_torch_library_def|torch_library_def_with_tags)\(")
STABLE_DEF_TEXT = b"library_def"  # in each such text: the needle the read-only strings are searched for


class RefusedDef(Enum):
    """What a Torch op library's def() does when torch refuses the schema (defined already: "Tried to register an
    operator ... multiple times"), which decides whether a second copy of it, or another build, loads."""

    THROWS = "throws"  # from the library's static initialiser: std::terminate aborts the process
    IGNORED = "ignored"  # the stable shim's error code is dropped: loading goes on, the first definition stays


class FoundIn(TextEnum):
    """Where in the file a registration was read."""

    SYMTAB = "symtab"  # local symbols of `.symtab`: the Torch blocks themselves
    DYNSYM = "dynsym"  # the registration API the library imports
    RODATA = "rodata"  # a schema string in its read-only data
    STATIC = "static"  # its dynamic symbols, for the frameworks whose registrations are told no finer


@dataclass(frozen=True)
class Registration:
    framework: str  # the framework's probe name (customops.frameworks): torch | onnxruntime | tensorrt | tensorflow
    kind: str  # namespace | fragment | impl | custom-ops | plugin-library | op-library
    name: str  # the namespace for Torch; "" where the name cannot be known statically
    library: str
    confidence: str  # "exact" or "inferred"
    found_in: FoundIn = FoundIn.STATIC
    api: str = ""  # Torch: "stable" for STABLE_TORCH_LIBRARY* (the C shims), "" for torch::Library
    blocks: tuple[str, ...] = ()  # Torch op-library, stable ABI: the block kinds its imported shims allow


def torch_schemas(strings: Iterable[bytes]) -> list[tuple[str, str]]:
    """(namespace or "", name[.overload]) of each string that is a whole op schema, in order, once each."""
    found: dict[tuple[str, str], None] = {}
    for text in strings:
        match = TORCH_SCHEMA.fullmatch(text)
        if match:
            ns, name, overload = (g.decode() if g else "" for g in match.groups()[:3])
            found[(ns, f"{name}.{overload}" if overload else name)] = None
    return list(found)


def static_registrations(info: ElfInfo, local_names: list[bytes]) -> list[Registration]:
    """What `info`'s library registers: Torch blocks from its `.symtab` names (`local_names`, those containing
    TORCH_LIBRARY), the other frameworks' from its dynamic symbols; see also torch_op_library()."""
    found: list[Registration] = []
    torch = {}
    for raw in local_names:
        match = TORCH_BLOCK.search(demangle(raw))  # e.g. (anonymous namespace)::TORCH_LIBRARY_init_ns(...)
        if not match:
            continue
        api = "stable" if match.group(1) else ""
        kind = {None: "namespace", "FRAGMENT": "fragment", "IMPL": "impl"}[match.group(2)]
        name = match.group(3)
        if kind != "namespace":
            name = re.sub(r"_\d+$", "", name)  # the per-translation-unit counter
        if kind == "impl":
            name = name.rsplit("_", 1)[0]  # the dispatch key (CPU, Meta, ...) has no underscore
        torch[(kind, name)] = Registration(PYTORCH.probe, kind, name, info.path, "exact", FoundIn.SYMTAB, api)
    found += torch.values()
    symbols = info.symbols
    exported = set(symbols.names(symbols.exported_mask.nonzero()[0]))
    imported = set(symbols.names(symbols.undefined_mask.nonzero()[0]))
    if exported >= ORT_ENTRY_POINTS:
        found.append(Registration(ONNXRUNTIME.probe, "custom-ops", "", info.path, "exact"))
    if b"getPluginRegistry" in imported or exported & set(TRT_PLUGIN_EXPORTS):
        found.append(Registration(TENSORRT.probe, "plugin-library", "", info.path, "inferred"))
    if any(marker in n for n in imported for marker in TF_REGISTERS):
        found.append(Registration(TENSORFLOW.probe, "op-library", "", info.path, "inferred"))
    return found


def torch_op_library(info: ElfInfo, strings: Sequence[bytes]) -> list[Registration]:
    """What a Torch op library registers as far as its imports and read-only `strings` tell, `.symtab` or not:
    an `op-library` registration (name "") when it imports the API that defines schemas, and one `schema`
    registration per schema string, named `ns::op` where the schema says its namespace, `op` where it does not.
    The imports bound the kinds of its blocks, no more: the stable StableLibrary constructor calls the shim of
    each kind on one branch, so a library may import all three and use one; one it does not import it cannot
    use (`blocks`). torch::Library takes the kind as an argument: nothing is told there."""
    imported = _imports(info)
    path = info.path
    if not any(marker in name for name in imported for marker in TORCH_REGISTERS):
        return []
    api = "stable" if imported & set(STABLE_SHIMS) else ""
    kinds = zip(STABLE_SHIMS, ("namespace", "fragment", "impl"), strict=True)
    blocks = tuple(kind for shim, kind in kinds if shim in imported)
    found = []
    if any(marker in name for name in imported for marker in TORCH_DEFINES):
        found.append(Registration(PYTORCH.probe, "op-library", "", path, "inferred", FoundIn.DYNSYM, api, blocks))
        found += [Registration(PYTORCH.probe, "schema", f"{ns}::{op}" if ns else op, path, "inferred", FoundIn.RODATA,
                               api)
                  for ns, op in torch_schemas(strings)]
    return found


def refused_def(info: ElfInfo, strings: Iterable[bytes]) -> RefusedDef | None:
    """What the library does with a schema definition torch refuses; None where it defines no schemas. torch::Library's
    def throws; the stable shims (aoti_torch_library_def, torch_library_def_with_tags) return an error code,
    checked where a check's text is among `strings` (its read-only strings holding STABLE_DEF_TEXT). Without one,
    the calls are unchecked only if they are StableLibrary's (its STABLE_TORCH_LIBRARY* blocks, from `.symtab`):
    other code calling the shims may check them its own way."""
    imported = _imports(info)
    if not any(marker in name for name in imported for marker in TORCH_DEFINES):
        return None
    if any(CLASSIC_DEFINES in name for name in imported) or any(STABLE_DEF_CHECK.search(s) for s in strings):
        return RefusedDef.THROWS
    return RefusedDef.IGNORED


def _imports(info: ElfInfo) -> set[bytes]:
    symbols = info.symbols
    return set(symbols.names(symbols.undefined_mask.nonzero()[0]))
