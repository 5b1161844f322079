"""CO406 for protobuf: a preloaded library whose descriptor tables stand in for another library's tables and
bring along private copies of files that library registers itself. The server aborts before main().

protoc gives each .proto file a `descriptor_table_<file>` (customops.inspect.protobuf_descriptors); every
library's static initialisers register its tables, imports first, into protobuf's generated pool, and a file
registered twice aborts (`File already exists in database: <file>`, then `Check failed:
GeneratedDatabase()->Add(...)`). A preloaded library that exports a table the framework also exports wins
the framework's own references to it (the linker model's bindings), so the framework registers the
preloaded copy. That is harmless while the copy's imports are the framework's tables too (the preload
exports or imports them: one table, one registration; tensorflow-decision-forests 1.12 under TensorFlow
2.19), and aborts when one of its imports is the preload's private copy (named nowhere in its `.dynsym`) of
a file the framework registers from its own table (tensorflow-text 2.21's op libraries under TensorFlow
2.21: google/protobuf/any.proto). Which duplicate the runtime meets first depends on the framework's
initialiser order; the prediction names the first in import order of the replaced tables, by name.

The finding is CO406, made by its emitter, customops.rules.registrations.duplicate_registration; CO401 still
reports the interposition itself.
"""

from __future__ import annotations

from collections import defaultdict

from customops.findings import Finding, Related
from customops.inspect.protobuf_descriptors import DescriptorFacts, proto_file, table_symbol
from customops.linker.prediction import Prediction
from customops.rules.context import RuleContext
from customops.rules.registrations import duplicate_registration

SHOWN = 10


def check(ctx: RuleContext) -> list[Finding]:
    prediction = ctx.prediction
    assert prediction is not None
    preloads = {s.path: s for s in ctx.plan.preloads if s.host_path in ctx.files.descriptors}
    replaced: dict[tuple[str, str], set[str]] = defaultdict(set)  # (preload, framework) -> .proto files
    for binding in prediction.interpositions(involving=set(preloads)):
        winner = binding.winner
        proto = proto_file(binding.symbol)
        if proto is None or winner is None or winner.object not in preloads:
            continue
        if binding.referrer in {loser.object for loser in binding.losers}:
            replaced[(winner.object, binding.referrer)].add(proto)
    findings = []
    for (preload, framework), protos in sorted(replaced.items()):
        step = preloads[preload]
        twice = _registered_twice(sorted(protos), ctx.files.descriptors[step.host_path], prediction, framework)
        if not twice:
            continue
        shown = sorted(protos)[:SHOWN]
        findings.append(duplicate_registration(
            f"preloaded {preload} replaces {len(protos)} protobuf descriptor table(s) of {framework}, and their "
            f"imports include its private copies of {len(twice)} .proto file(s) that {framework} also registers: "
            f"the server aborts at start, registering {twice[0]} twice",
            model=step.model, library=preload, file=step.host_path, symbol=twice[0], related=(Related(framework),),
            predicted=f"File already exists in database: {twice[0]}",
            evidence=(f"winner: {preload}", f"loser: {framework}",
                      *(f"replaced table: {table_symbol(p).decode()} ({p})" for p in shown),
                      *(f"registered twice: {p} ({framework}'s table and {preload}'s private copy)"
                        for p in twice[:SHOWN]),
                      *([f"and {len(twice) - SHOWN} more file(s) registered twice"] if len(twice) > SHOWN else []),
                      "hide the bundled protobuf code and tables (-fvisibility=hidden, a version script), or load "
                      "the library with dlopen(RTLD_LOCAL) (model_operations) instead of LD_PRELOAD")))
    return findings


def _registered_twice(roots: list[str], facts: DescriptorFacts, prediction: Prediction, framework: str) -> list[str]:
    """The files the framework registers from its own tables and, through the replaced tables' imports,
    again from the preload's private copies: in the order protobuf's AddDescriptors walks (imports first)."""
    twice: list[str] = []
    seen: set[str] = set()
    for root in roots:
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            proto, done = stack.pop()
            if done:
                if facts.private(proto) and _registers_its_own(prediction, framework, proto):
                    twice.append(proto)
                continue
            if proto in seen:
                continue
            seen.add(proto)
            stack.append((proto, True))
            stack.extend((p, False) for p in reversed(facts.imports.get(proto, ())))
    return twice


def _registers_its_own(prediction: Prediction, framework: str, proto: str) -> bool:
    """Whether the framework's references to the file's table bind to a table other than the preload's
    (its own): the framework registers the file itself."""
    binding = prediction.binding(framework, table_symbol(proto))
    return binding is not None and binding.winner is not None
