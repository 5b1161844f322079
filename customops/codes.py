"""The code table: every finding code, its default severity, and its explanation.

One source for `customops explain CODE`, the SARIF rule metadata, the table in docs/codes/README.md and the pages under
docs/codes/ (written by `python -m customops.codes --write-docs`; tests/test_code_docs.py fails when they
drift). Codes are a
public contract for CI users: a code's meaning never changes; new codes are added, none are reused.
Each explanation follows one template: what it detects, why it matters (the runtime failure it
predicts), how to fix it, and how to suppress it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (expected error, warning or info)") from None


@dataclass(frozen=True)
class Code:
    code: str
    severity: Severity
    title: str
    what: str
    why: str
    fix: str
    emitted: bool = True  # False: reserved, documented but not reported yet


E, W, N = Severity.ERROR, Severity.WARNING, Severity.INFO  # N: notice (info)

_TABLE = (
    Code("CO101", E, "config.pbtxt unreadable or invalid for the schema",
         "The model's configuration cannot be read, or does not parse as Triton's ModelConfig protobuf text.",
         "Triton refuses the model: `failed to read text proto from <path>`, and with the default "
         "--exit-on-error the server does not start.",
         "Fix the field named at the reported line and column (the schema is Triton's model_config.proto)."),
    Code("CO102", E, "backend cannot be determined",
         "Neither platform, backend, default_model_filename nor the files of the first version directory "
         "say which backend serves the model, or platform and backend contradict each other.",
         "Triton reports e.g. `Invalid model name: Could not determine backend for model ...` and the model "
         "does not load.",
         "Set `backend:` (or `platform:`) in config.pbtxt, or name the model file model.<backend>."),
    Code("CO103", E, "no loadable version directory under the version policy",
         "No numeric version directory (without a leading zero) matches the model's version policy.",
         "Triton: `at least one version must be available under the version policy of model '<M>'`.",
         "Add a version directory such as `1/`, or change version_policy."),
    Code("CO104", W, "op library path is relative or bare",
         "An op_library_filename (or a manifest path used as one) is not absolute.",
         "Triton passes it to dlopen as written: a relative path is resolved against the server's working "
         "directory, a bare name through the ld.so search, never against the model directory.",
         "Use an absolute path inside the container (e.g. /models/<model>/ops/libfoo.so)."),
    Code("CO105", W, "model_operations given for a backend that ignores it",
         "model_operations.op_library_filename is set for a backend other than tensorflow or onnxruntime.",
         "The library is silently never loaded; ops it registers are missing at inference.",
         "Load PyTorch op libraries with [pytorch] ops and TensorRT plugins with [tensorrt] plugins in "
         "customops.toml (customops launch then preloads or passes them)."),
    Code("CO106", E, "manifest invalid",
         "customops.toml has an unknown key, a wrong type, or a path that does not exist.",
         "customops refuses to guess what should be loaded.",
         "Fix the key named in the message; see the README for the manifest's shape."),
    Code("CO107", W, "suppression matches no finding",
         "A [check] ignore table in customops.toml, or a `# customops: ignore[...]` / `ignore-file[...]` comment "
         "in a config.pbtxt, suppressed no finding although the run could have found what it names; or such a "
         "comment is malformed or names no customops code. An unused one is not reported with --load-model, "
         "nor for a code the run cannot produce (only CO1xx without the container's libraries, no CO408 with a "
         "profile, no CO409 or CO507 without --probe) or does not select.",
         "Nothing fails today, but a stale suppression silently hides the next real problem with that code "
         "there, and a malformed one hides nothing while its author believes it does.",
         "Remove the entry or comment, or correct its code, globs or line (a same-line comment applies only to "
         "findings that point at that line; `ignore-file[...]` to every finding that points at the file)."),
    Code("CO108", E, "a model the server is asked for is in no repository",
         "A model named with tritonserver --load-model (explicit mode), or by a step of an ensemble, is in none "
         "of the model repositories.",
         "`failed to poll model '<M>': model not found in any model repository.`; an ensemble naming it is not "
         "served: `ensemble <E> contains models that are not available or ambiguous: <M>`.",
         "Correct the name, or add the model's directory to a repository."),
    Code("CO109", E, "an ensemble cannot be served",
         "An ensemble (platform \"ensemble\") has no ensemble_scheduling, or one of its steps names a model that "
         "itself fails (found by this check); in explicit mode the models its steps name are loaded with it and "
         "checked too.",
         "`ensemble scheduling must be set for ensemble <E> whose platform is ensemble`, or `ensemble '<E>' "
         "depends on '<M>' which has no loaded version.`: the ensemble is UNAVAILABLE.",
         "Fix the step's model first (its own finding says how), or add ensemble_scheduling."),
    Code("CO110", E, "a model name is in several repositories",
         "Two --model-repository directories hold a model of the same name, and --model-namespacing is off.",
         "`failed to poll model '<M>': not unique across all model repositories`: the server loads neither.",
         "Rename one of the models, or start the server with --model-namespacing=true."),
    Code("CO201", E, "backend library not found",
         "The backend library (libtriton_<backend>.so or the runtime field) exists in none of the places "
         "Triton searches: <model>/<version>/, <model>/, <backend_dir>/<backend>/.",
         "Triton: `unable to find backend library for backend '<B>'` and the model does not load.",
         "Install the backend in the backend directory, or put the library in the model directory."),
    Code("CO202", E, "required backend entry point missing",
         "The backend library does not export TRITONBACKEND_ModelInstanceExecute with C linkage and "
         "default visibility (Triton finds it with dlsym on its RTLD_LOCAL handle).",
         "Triton: `unable to find required entrypoint 'TRITONBACKEND_ModelInstanceExecute' in shared library: "
         "<lib>: undefined symbol: TRITONBACKEND_ModelInstanceExecute`.",
         "Declare it extern \"C\" and export it (a version script exporting TRITONBACKEND_* is recommended)."),
    Code("CO203", E, "framework backend absent from the container",
         "The model needs a framework backend the container does not ship (e.g. tensorflow from 25.03 on).",
         "Triton cannot load the model: `unable to find backend library for backend '<B>'`.",
         "Use a container release that ships the backend, or convert the model."),
    Code("CO301", E, "library file missing or unreadable",
         "A library named in config.pbtxt, the manifest or the server arguments does not exist or cannot be read.",
         "dlopen fails with `cannot open shared object file`; for LD_PRELOAD ld.so only warns and the "
         "server starts without it (ops then fail at inference, e.g. `Op type not registered`).",
         "Fix the path, or mount the file into the container at that path."),
    Code("CO302", E, "needed library not found",
         "A DT_NEEDED dependency of a library is found nowhere the dynamic linker searches (every path "
         "considered is listed in order, an LD_LIBRARY_PATH entry with why customops launch sets it). A TensorRT "
         "or CUDA runtime dependency of another major version than the container's is reported as CO501 or "
         "CO502 instead, saying that it is not found.",
         "`<lib>: cannot open shared object file: No such file or directory` at dlopen or at startup.",
         "Ship the dependency next to the library with RUNPATH $ORIGIN, or add its directory to "
         "LD_LIBRARY_PATH (customops launch does this for framework backends)."),
    Code("CO303", E, "not a loadable ELF for this target",
         "The file is not an ELF shared object of the container's class and machine (wrong ELF class, "
         "another architecture, not ELF at all, e.g. a Git LFS pointer committed in place of the library).",
         "`wrong ELF class: ELFCLASS32`, `invalid ELF header`, or a misleading `No such file or directory`.",
         "Build the library for the container's architecture; for a Git LFS pointer, run `git lfs pull` (in CI: "
         "actions/checkout with lfs: true)."),
    Code("CO304", E, "undefined symbol: fails at load",
         "A symbol the library needs at load time (data, or any symbol under RTLD_NOW) is defined by no "
         "object in its lookup scope. Python C API symbols (Py*, _Py*) missing from an op library mean it is a "
         "Python extension module, which only a Python interpreter loads.",
         "dlopen fails: `<lib>: undefined symbol: <name>`; the model (or the server) does not load.",
         "Link the library against the library that defines the symbol, or build it against the framework "
         "version in the container."),
    Code("CO305", W, "undefined function: fails at first call",
         "A function the library calls through the PLT is defined nowhere, and the library is loaded lazily.",
         "The process dies at the first call: `symbol lookup error: <lib>: undefined symbol: <name>` (exit 127).",
         "As CO304."),
    Code("CO306", E, "required symbol version not provided",
         "The library needs a version node (GLIBC_x, GLIBCXX_x, CXXABI_x, ...) that the providing library in "
         "the container does not define.",
         "`<provider>: version `GLIBCXX_3.4.32' not found (required by <lib>)`.",
         "Build inside the matching container (or against its glibc/libstdc++), or ship a newer libstdc++."),
    Code("CO307", E, "LD_PRELOAD entry unusable",
         "An LD_PRELOAD entry contains a space or a colon (ld.so splits on both), is relative, or is "
         "ignored under secure-execution rules.",
         "ld.so loads something else, or nothing, and only warns.",
         "Use absolute paths without spaces or colons."),
    Code("CO308", E, "ONNX Runtime op library does not export RegisterCustomOps",
         "ONNX Runtime dlsym()s RegisterCustomOps after loading an op library; this one does not export it.",
         "`Failed to get symbol RegisterCustomOps with error: ... undefined symbol: RegisterCustomOps`.",
         "Export `OrtStatus* RegisterCustomOps(OrtSessionOptions*, const OrtApiBase*)` with C linkage."),
    Code("CO401", W, "a preloaded library interposes definitions of other libraries",
         "A library in the global scope (LD_PRELOAD) defines symbols that framework or system libraries "
         "also define; the preloaded definitions win for every object in the process.",
         "Silent behaviour changes or crashes far from the cause (e.g. a bundled protobuf, zlib or re2).",
         "Hide the bundled copies (-fvisibility=hidden, a version script) or link them statically and "
         "privately; load the library with dlopen(RTLD_LOCAL) instead of LD_PRELOAD where possible."),
    Code("CO402", W, "the same strong symbol is defined by two libraries in one scope",
         "Two custom libraries loaded into one lookup scope both define a strong symbol; the first in "
         "scope order wins for both.",
         "The losing library silently runs the winner's code.",
         "Hide internal symbols, or rename them."),
    Code("CO403", E, "object size differs between competing definitions",
         "Competing definitions of a data object have different sizes; code compiled for one size runs "
         "against the other.",
         "Memory corruption.",
         "Make sure both libraries use the same definition, or hide one."),
    Code("CO404", N, "op library re-defines symbols of the framework library it links",
         "The library exports copies of symbols its framework exports (e.g. compiled-in protobuf classes).",
         "Which copy runs depends on scope order; usually the framework's, which is what is wanted.",
         "Usually nothing; hide the copies to be sure."),
    Code("CO405", W, "GNU_UNIQUE symbol merged across libraries meant to be isolated",
         "STB_GNU_UNIQUE definitions are merged process-wide, across RTLD_LOCAL.",
         "Libraries loaded separately share state (registries, singletons); the first loaded wins.",
         "Build with -fno-gnu-unique, or hide the symbols."),
    Code("CO406", E, "duplicate registration",
         "Two libraries register the same Torch namespace (TORCH_LIBRARY or STABLE_TORCH_LIBRARY, read from .symtab) or"
         " op schema (namespace from .symtab or the schema, op from its schema strings; a warning where a stripped "
         "library's namespace is unknown), one Torch op library is loaded from two files (same content, stripped or "
         "not: its imports show it defines schemas), or the same TF, ORT or TensorRT registrations (statically: when "
         "the libraries are identical; with --probe: the op names each registers, and what the framework does when they"
         " are loaded together, and for TensorRT which of the container's built-in plugins, registered by "
         "libnvinfer_plugin's initLibNvInferPlugins after the plugin libraries, a library registers first); or a "
         "preloaded library's protobuf descriptor tables replace a library's own while importing the preload's private "
         "copies of .proto files that library registers too (read from .dynsym and the embedded descriptors).",
         "Depends on the framework: first wins, silent drop, or abort at load (Torch: \"Only a single TORCH_LIBRARY\", "
         "\"Tried to register an operator ... multiple times\"; a second STABLE_TORCH_LIBRARY crashes with SIGSEGV; a "
         "stable-ABI library built with torch headers before 2.13 ignores a refused schema and loads, its kernels "
         "replacing the first's: \"Overriding a previously registered kernel\"); protobuf aborts the server at start "
         "(File already exists in database: <file>).",
         "Load only one of the libraries, or rename the registrations; for protobuf, hide the preload's "
         "protobuf code and tables (-fvisibility=hidden, a version script) or load it with dlopen(RTLD_LOCAL)."),
    Code("CO407", W, "two different files with the same SONAME",
         "Two different files that share a SONAME are both asked for; only the first loaded is ever used.",
         "The second is silently replaced by the first: its symbols may be missing or different.",
         "Load one copy, or give the libraries different SONAMEs."),
    Code("CO408", E, "a model calls ops that no loaded library registers",
         "A TorchScript model's serialized code calls ops.<ns>.<op> for a namespace that no loaded op library "
         "defines (TORCH_LIBRARY, STABLE_TORCH_LIBRARY or their fragments, read from .symtab, or a schema "
         "string qualified with the namespace; for a stripped stable-ABI library, the schema of an op called "
         "there; nothing is claimed while a stripped op library's schemas may be incomplete) and the "
         "container's PyTorch libraries do "
         "not mention; or an ONNX model uses an operator domain that the container's ONNX Runtime does not "
         "build in, while its config lists no custom-op library. Needs the container's files (not a profile). "
         "With --probe, also the ops a model uses that its probed op libraries do not register, and a "
         "TensorFlow SavedModel's or GraphDef's op types that TensorFlow does not know once the op libraries "
         "are loaded.",
         "torch::jit::load fails with \"Unknown builtin op\"; ONNX Runtime fails to create the session with "
         "\"is not a registered function/op\"; TensorFlow with \"Op type not registered\". The model does not load.",
         "TorchScript: list the op library under [pytorch] ops in customops.toml (customops launch preloads "
         "it). ONNX: add model_operations { op_library_filename: ... } to the model's config.pbtxt."),
    Code("CO409", E, "a library fails to load with the real framework",
         "With --probe: the op library, loaded alone in an isolated child process the way its framework loads "
         "op libraries (torch.ops.load_library, TF_LoadLibrary, ONNX Runtime's RegisterCustomOps), fails, "
         "crashes or hangs. The message is the framework's own. TensorFlow and ONNX Runtime probes use the "
         "container's own library where it loads on this machine. When the framework that probed is not the "
         "container's version (CO507), the failure is reported as info, not an error: it is evidence about "
         "another version, not a verdict on the container's (a Torch op library is then loaded again with the "
         "container's own libtorch, without Python: an error when that fails too).",
         "The same failure at model load in the server (or a crash of the whole server for an abort).",
         "Fix what the message names; if the probing interpreter is not the container's framework (CO507), "
         "probe with one that is (--probe-python)."),
    Code("CO410", W, "a TensorRT plugin library's registrations could not be seen",
         "With --probe: a TensorRT plugin library, dlopen()ed in an isolated child process as Triton does, "
         "registered no plugin creator (as one whose creators only its getCreators entry point returns: only "
         "IPluginRegistry::loadLibrary registers those), crashed or failed there (against customops' stand-in "
         "for libnvinfer), or needs a libnvinfer major the stand-in has no layout for.",
         "Engines get none of its plugins (\"getPluginCreator could not find plugin\"), unless it registers "
         "when called (an initLibNvInferPlugins-style function); one the stand-in cannot load may need real "
         "work from TensorRT or CUDA while loading, which only the container can show.",
         "Make the library register its creators when it is loaded (REGISTER_TENSORRT_PLUGIN, or a static "
         "initializer calling registerCreator); confirm in the container with trtexec and its verbose log; or "
         "suppress this code for the library."),
    Code("CO411", W, "a TensorRT plugin creator is registered where no lookup finds it",
         "With --probe: a library registers a creator in a namespace other than its own (REGISTER_TENSORRT_PLUGIN "
         "uses \"\"); TensorRT's registry files it there, and getCreator looks only under the creator's own.",
         "Engines needing it fail to deserialize: `getPluginCreator could not find plugin <name> version <v>`.",
         "Register it in its own namespace (registerCreator(creator, creator.getPluginNamespace()))."),
    Code("CO501", E, "TensorRT major version mismatch",
         "A TensorRT plugin library needs libnvinfer.so.N of another major version than the container's.",
         "`libnvinfer.so.8: cannot open shared object file` or undefined TensorRT symbols.",
         "Rebuild the plugin against the TensorRT version of the container release."),
    Code("CO502", E, "CUDA runtime major version mismatch",
         "The library needs a libcudart major version the container does not provide.",
         "`libcudart.so.N: cannot open shared object file`.",
         "Rebuild against the container's CUDA version."),
    Code("CO503", W, "C++ string-ABI flavour mismatch",
         "The library uses the pre-C++11 (or C++11) std::string ABI while the framework it links uses the "
         "other one.",
         "Undefined std::string symbols at load, or crashes passing strings across the boundary.",
         "Build with the framework's _GLIBCXX_USE_CXX11_ABI value."),
    Code("CO504", E, "framework ABI drift",
         "Symbols the library imports from its framework are not provided by the container's framework "
         "library: it was built against another version.",
         "`undefined symbol: <framework symbol>` at load.",
         "Rebuild against the framework version shipped in the container (the finding names it, or the "
         "container's library file when no file name gives the version)."),
    Code("CO505", W, "ONNX Runtime API version newer than the container's",
         "The op library needs an ONNX Runtime version node newer than the container's libonnxruntime.",
         "GetApi() returns NULL or the library fails to load.",
         "Build against the container's ONNX Runtime version or older."),
    Code("CO506", W, "TRITONBACKEND API newer than the server's",
         "The backend was built against a newer TRITONBACKEND API than the server provides (where determinable).",
         "`Triton TRITONBACKEND API version: X.Y does not support '<backend>' TRITONBACKEND API version: A.B`.",
         "Build against the core repository tag that matches the server release.", emitted=False),
    Code("CO507", N, "the probing framework is not the container's version",
         "With --probe: the torch, tensorflow or onnxruntime that loaded the op libraries has another version "
         "than the container's framework (read from its files: TF_Version() of libtensorflow_cc.so.2, "
         "TORCH_VERSION in libtorch_cpu.so, libonnxruntime.so's file name). It names both versions and the "
         "libraries that failed to load with the other one (CO409, then info).",
         "Registrations and failures observed by the probes may differ from the server's.",
         "Probe with the container's framework: run inside the container, or pass --probe-python (and "
         "--probe-onnxruntime) pointing at matching versions."),
    Code("CO602", W, "LD_PRELOAD reaches child processes that do not need it",
         "The plan preloads libraries while the server also starts child processes: Python backend stubs "
         "(triton_python_backend_stub) and anything the server or a health check runs inherit LD_PRELOAD.",
         "Every child process gets the preloaded libraries' symbols in its global scope: interposition, crashes "
         "or `cannot be preloaded` warnings in processes that have nothing to do with the custom ops.",
         "Prefer mechanisms without LD_PRELOAD: TensorRT plugins through --backend-config (load = "
         "\"backend-config\"), TensorFlow and ONNX Runtime ops through model_operations."),
    Code("CO603", N, "a library is loaded from outside the repository and the container's library directories",
         "A loaded library lies neither in the model repository nor in the container's system or Triton "
         "directories (provenance).",
         "Nothing fails, but the file is managed by neither the repository nor the image: it may differ between "
         "machines.",
         "Keep custom libraries in the repository (or the image) so that they are versioned with what uses them."),
    Code("CO601", W, "a loaded library, or a directory on a load path, is writable by others",
         "A library Triton loads, or a directory searched for one, is writable by group or others.",
         "Anyone who can write there can run code inside the server.",
         "chmod go-w the file and the directory."),
)

CODES: dict[str, Code] = {c.code: c for c in _TABLE}


README_BEGIN = "<!-- finding codes: generated from customops/codes.py by `python -m customops.codes --write-docs` -->"
README_END = "<!-- end of finding codes -->"


def docs_url(code: str) -> str:
    """The code's documentation page, docs/codes/<code>.md in the project's repository (SARIF helpUri)."""
    from customops import PROJECT_URL

    return f"{PROJECT_URL}/blob/main/docs/codes/{code}.md"


def _sections(c: Code) -> list[tuple[str, list[tuple[str, ...]]]]:
    """The template every explanation follows: (heading, lines); a line's parts alternate between prose and
    what is typed (a command, a manifest entry, a comment), which the docs show as code."""
    return [
        ("What it detects", [(c.what,)]),
        ("Why it matters", [(c.why,)]),
        ("How to fix it", [(c.fix,)]),
        ("How to suppress it", [
            ("Every finding of it: ", f"customops check --ignore {c.code}", ", or in customops.toml ",
             f'[check] ignore = ["{c.code}"]'),
            ("Some findings: ", f'[check] ignore = [{{ code = "{c.code}", library = "<glob>", symbol = "<glob>", '
             'reason = "<why>" }]'),
            ("One line of a config.pbtxt: ", f"# customops: ignore[{c.code}]", " on that line (",
             f"ignore-file[{c.code}]", " for the whole file)"),
        ]),
    ]


def explain(code: str) -> str:
    c = CODES[code]
    lines = [f"{c.code}: {c.title} (default severity: {c.severity})"]
    for heading, body in _sections(c):
        lines += ["", heading, *(f"  {''.join(parts)}" for parts in body)]
    return "\n".join(lines)


def _markdown(text: str) -> str:
    """Prose for Markdown: <placeholders>, & and * outside `code spans` escaped, so that they show as written."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "`".join(parts)


def _markdown_line(parts: tuple[str, ...]) -> str:
    return "".join(_markdown(part) if i % 2 == 0 else f"`{part}`" for i, part in enumerate(parts))


def doc_page(code: str) -> str:
    """docs/codes/<code>.md: the explanation, as `customops explain` prints it, in Markdown."""
    c = CODES[code]
    lines = [f"# {c.code}: {_markdown(c.title)}", "", f"Default severity: {c.severity}."]
    if not c.emitted:
        lines += ["", "Reserved: documented, but no check reports it yet."]
    for heading, body in _sections(c):
        bullet = "- " if len(body) > 1 else ""
        lines += ["", f"## {heading}", "", *(bullet + _markdown_line(parts) for parts in body)]
    lines += ["", f"`customops explain {c.code}` prints this explanation.", ""]
    return "\n".join(lines)


def readme_table() -> str:
    """The table of codes in docs/codes/README.md, between README_BEGIN and README_END."""
    rows = [f"| [{c.code}]({c.code}.md) | {c.severity} | {_markdown(c.title)}"
            f"{'' if c.emitted else ' (reserved: not reported yet)'} |" for c in _TABLE]
    return "\n".join([README_BEGIN, "| code | severity | meaning |", "|---|---|---|", *rows, README_END])


def generated(root: Path) -> dict[Path, str]:
    """Every generated file under the checkout `root` with the content it should have."""
    readme = root / "docs" / "codes" / "README.md"
    text = readme.read_text()
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    pages = {root / "docs" / "codes" / f"{code}.md": doc_page(code) for code in CODES}
    return {readme: text[:start] + readme_table() + text[end:], **pages}


def main(argv: list[str]) -> int:
    """`python -m customops.codes --write-docs [CHECKOUT]`: rewrite docs/codes/: its README's table and a page per code."""
    if not argv or argv[0] != "--write-docs":
        print("usage: python -m customops.codes --write-docs [CHECKOUT]", file=sys.stderr)
        return 2
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).parent.parent)
    (root / "docs" / "codes").mkdir(parents=True, exist_ok=True)
    for path, content in generated(root).items():
        path.write_text(content)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
