"""The extension modules a Python backend model's stub imports, imported for real (`check --probe`): by the probe's
interpreter where it is the stub's Python, contained as every probe is (customops.probe.frameworks)."""

from __future__ import annotations

import json
import os

from customops.probe.frameworks import IMPORTS
from customops.probe.groups import ProbedGroup, ProbeSettings, cached_batches, this_glibc
from customops.probe.needs import container_needs
from customops.triton.python_modules import version_of
from customops.triton.python_stub import StubRun


def stub_group(run: StubRun, settings: ProbeSettings) -> ProbedGroup:
    """The extension modules a model's stub imports, imported by the probe's interpreter where it is the stub's
    Python (else unavailable: the environment's own python3 is never run), the model's and its environment's
    directories first on sys.path: each alone, then all in import order, as the stub imports them. Not cached: what
    an import runs depends on those directories' files."""
    steps = tuple(step for step, _ in run.outcomes)
    sources = tuple(os.path.abspath(s.host_path) for s in steps)
    needs = {library: tuple(n for n in found if not version_of(n[0]))  # the interpreter is Python's own library
             for library, found in container_needs(run.prediction, sources).items()}
    chains = dict(run.chains)
    names = {os.path.abspath(s.host_path): chains.get(s.path, ("",))[-1] for s in steps}
    settings_json = json.dumps({"version": run.python.version if run.python else "", "path": list(run.import_path),
                                "names": names})
    batches = [(source,) for source in sources] + ([sources] if len(sources) > 1 else [])
    *each, last = cached_batches(settings, IMPORTS, settings_json, None, batches, needs)
    alone = tuple(r[0] for r in each) if len(sources) > 1 else last
    return ProbedGroup(IMPORTS, run.stub.model, steps, None, alone, last, glibc=this_glibc(),
                       searched_here=tuple(s for s in sources if s not in needs))
