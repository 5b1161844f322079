"""What a library registers with its framework, read statically (no code runs), with a confidence.

- Torch: TORCH_LIBRARY / TORCH_LIBRARY_FRAGMENT / TORCH_LIBRARY_IMPL blocks leave local symbols in `.symtab`
  (`TORCH_LIBRARY_init_<ns>`, `TORCH_LIBRARY_static_init_<ns>`, `..._FRAGMENT_..._<ns>_<n>`,
  `..._IMPL_..._<ns>_<DispatchKey>_<n>`); names are found in the raw `.strtab` and demangled. Exact while
  `.symtab` is there; a stripped library says nothing (the macros' static initialisers are local symbols,
  torch/library.h).
- ONNX Runtime: the `RegisterCustomOps` export ORT dlsym()s (exact).
- TensorRT: imports of `getPluginRegistry` or the TensorRT 10 plugin-library exports (`getCreators`,
  `getPluginCreators`, `setLoggerFinder`) mark a plugin library; creator names are not readable statically.
- TensorFlow: references to the op registry (`OpDefBuilderWrapper`, `OpRegistry`) mark an op library; op
  names are not reliably readable statically (schema strings are split at -O2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from customops.elf.demangle import demangle
from customops.elf.records import ElfInfo

TORCH_BLOCK = re.compile(r"\bTORCH_LIBRARY(?:_(FRAGMENT|IMPL))?_(?:static_)?init_(\w+)")
TRT_PLUGIN_EXPORTS = (b"getCreators", b"getPluginCreators", b"setLoggerFinder")


@dataclass(frozen=True)
class Registration:
    framework: str  # torch | onnxruntime | tensorrt | tensorflow
    kind: str  # namespace | fragment | impl | custom-ops | plugin-library | op-library
    name: str  # the namespace for Torch; "" where the name cannot be known statically
    library: str
    confidence: str  # "exact" or "inferred"
    source: str = "static"


def static_registrations(info: ElfInfo, local_names: list[bytes]) -> list[Registration]:
    found: list[Registration] = []
    torch = {}
    for raw in local_names:
        match = TORCH_BLOCK.search(demangle(raw))  # e.g. (anonymous namespace)::TORCH_LIBRARY_init_ns(...)
        if not match:
            continue
        kind = {None: "namespace", "FRAGMENT": "fragment", "IMPL": "impl"}[match.group(1)]
        name = match.group(2)
        if kind != "namespace":
            name = re.sub(r"_\d+$", "", name)  # the per-translation-unit counter
        if kind == "impl":
            name = name.rsplit("_", 1)[0]  # the dispatch key (CPU, Meta, ...) has no underscore
        torch[(kind, name)] = Registration("torch", kind, name, info.path, "exact")
    found += torch.values()
    symbols = info.symbols
    exported = set(symbols.names(symbols.exported_mask.nonzero()[0]))
    imported = set(symbols.names(symbols.undefined_mask.nonzero()[0]))
    if b"RegisterCustomOps" in exported:
        found.append(Registration("onnxruntime", "custom-ops", "", info.path, "exact"))
    if b"getPluginRegistry" in imported or exported & set(TRT_PLUGIN_EXPORTS):
        found.append(Registration("tensorrt", "plugin-library", "", info.path, "inferred"))
    if any(b"OpDefBuilderWrapper" in n or b"10tensorflow11OpRegistry" in n or b"10tensorflow10RegisterOp" in n
           for n in imported):
        found.append(Registration("tensorflow", "op-library", "", info.path, "inferred"))
    return found
