"""customops probe LIB...: load each library for real in an isolated child process and report what happened."""

from __future__ import annotations

import argparse
import json
import os

from customops.frameworks import PROBE_ORDER, PYTHON

IMPORTS = PYTHON.backend  # customops.probe.frameworks.IMPORTS: the stub's interpreter importing modules


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="load libraries for real, each in an isolated child process",
                       description=__doc__)
    p.add_argument("libraries", nargs="+", metavar="LIB", help="a shared library to load (hostile code is contained)")
    p.add_argument("--python", metavar="PATH", help="the interpreter that loads them (default: this one)")
    p.add_argument("--timeout", type=float, default=60, help="seconds per library (default 60)")
    p.add_argument("--memory-mb", type=int, default=4096, help="address-space limit per probe (default 4096)")
    p.add_argument("--together", action="store_true",
                   help="load them in order into one process (duplicate registrations show there)")
    p.add_argument("--framework", choices=("none", *(f.probe for f in PROBE_ORDER), IMPORTS),
                   default="none", help="load as that framework loads op libraries and list what its registry "
                   "gained; tensorrt: against customops' stand-in for libnvinfer, built with the machine's C++ "
                   "compiler, listing the plugin creators as namespace::name/version; python: import each as a "
                   "Python extension module with --python, as the Python backend's stub imports a model's "
                   "(default: a plain dlopen)")
    p.add_argument("--python-path", metavar="DIR", action="append", default=[],
                   help="with --framework python: a directory put before sys.path (repeatable; a model's "
                        "environment's site-packages)")
    p.add_argument("--onnxruntime-library", metavar="PATH",
                   help="the libonnxruntime.so that --framework onnxruntime registers into (default: the one in "
                        "the interpreter's onnxruntime package)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text for people, json for scripts (default: text)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from customops.probe.batch import probe_groups
    from customops.probe.frameworks import probe_group
    from customops.probe.results import ProbeStatus

    runtime = args.onnxruntime_library
    if args.framework == IMPORTS:  # any Python: the one given is the one meant
        runtime = json.dumps({"version": "", "path": [os.path.abspath(d) for d in args.python_path], "names": {}})
    if args.together:
        results = probe_group(tuple(args.libraries), args.python, args.timeout, args.memory_mb, args.framework,
                              runtime)
    else:  # each alone, in one sandbox that imports the framework once
        results = tuple(group[0] for group in probe_groups(tuple((lib,) for lib in args.libraries), args.python,
                                                          args.timeout, args.memory_mb, args.framework, runtime))
    if args.format == "json":
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        for r in results:
            print(f"{r.status.value:>8}  {r.library}" + (f": {r.message}" if r.message else ""))
            for name in r.registered:
                print(f"          registered {name}")
            if r.sandbox_files:
                print(f"          wrote into its sandbox: {', '.join(r.sandbox_files)}")
        for containment in sorted({r.containment for r in results if r.containment}):
            print(f"note: {containment}")
    return 0 if all(r.status is ProbeStatus.LOADED for r in results) else 1
