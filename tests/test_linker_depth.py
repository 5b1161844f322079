"""Deep and wide DT_NEEDED graphs (issue #15): thousands of libraries load in time linear in their number,
with no recursion limit, and the model still agrees with the real ld.so on every load, binding and error.
The libraries are written by fixtures/chain.py (a few milliseconds for thousands)."""

import io
import time
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import agree
from rich.console import Console

from customops.linker.messages import NOT_FOUND
from customops.linker.scopeindex import ScopeIndex
from customops.linker.types import AttemptResult, Dlopen, Environment, Scenario
from customops.report.resolve import render_prediction
from fixtures.chain import chain, diamonds, fan_out, function_of, write_graph


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    return tmp_path_factory.mktemp("graphs")


def test_a_chain_of_1000_libraries_loads_as_ld_so_loads_it(linker, loader, graphs):
    top = write_graph(graphs / "chain1000", chain(1000))
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(str(top), calls=(function_of(top.name),)),)))
    assert prediction.outcomes[-1].ok
    assert len(prediction.outcomes[-1].loaded) == 1000
    assert oracle.calls == [(function_of(top.name), "42")]  # every link of the chain was bound and called


def test_a_chain_1000_deep_is_shown_with_its_depth_beyond_16_levels_of_indentation(linker, loader, graphs):
    """resolve's load tree (whose rows `agree` compared with ld.so above) stays linear in size: a hostile chain
    does not print millions of spaces."""
    top = write_graph(graphs / "chain1000", chain(1000))
    console = Console(file=io.StringIO(), width=1000, no_color=True)
    render_prediction(linker.run(Scenario(loader, steps=(Dlopen(str(top)),))), linker.target, console)
    lines = console.file.getvalue().splitlines()
    last = next(line for line in lines if "libchain999.so =>" in line)
    assert last.startswith(" " * (9 + 2 * 16) + "[998] libchain999.so => ")
    assert max(map(len, lines)) < 400


def test_a_chain_of_5000_libraries_resolves_without_recursion_in_linear_time(linker, loader, graphs):
    top = write_graph(graphs / "chain5000", chain(5000))
    started = time.perf_counter()
    prediction = linker.run(Scenario(loader, steps=(Dlopen(str(top)),)))
    elapsed = time.perf_counter() - started
    outcome = prediction.outcomes[-1]
    assert outcome.ok
    assert list(outcome.loaded) == [str(graphs / "chain5000" / name) for name, _ in chain(5000)]
    last = str(graphs / "chain5000" / "libchain4998.so")
    assert prediction.binding(last, function_of("libchain4999.so")).winner.object.endswith("libchain4999.so")
    assert elapsed < 60, f"{elapsed:.1f} s: quadratic again? (about 4 s when linear, over 2 minutes when not)"


def test_a_name_every_library_of_a_chain_defines_binds_to_the_first_as_ld_so_binds_it(linker, loader, graphs):
    top = write_graph(graphs / "shared300", chain(300, prefix="libshared"), shared="common_fn")
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(str(top)),)))
    binding = prediction.binding(str(graphs / "shared300" / "libshared299.so"), "common_fn")
    assert binding.winner.object == str(top) and len(binding.losers) == 299


def test_1500_definitions_of_one_name_are_walked_once_per_scope_not_once_per_referrer(linker, loader, graphs):
    """Every referrer's lookup of the name has the same winner and losers: decided once, the losers shared
    (the model was quadratic in time and memory here: 50 s for 1,000 libraries)."""
    top = write_graph(graphs / "shared1500", chain(1500, prefix="libmany"), shared="common_fn")
    started = time.perf_counter()
    prediction = linker.run(Scenario(loader, steps=(Dlopen(str(top)),)))
    elapsed = time.perf_counter() - started
    assert prediction.outcomes[-1].ok
    raws = [raw for (_, name), raw in prediction.raw_bindings.items() if name == b"common_fn"]
    assert len(raws) == 1500 and len({id(raw.losers) for raw in raws}) == 1 and len(raws[0].losers) == 1499
    assert elapsed < 60, f"{elapsed:.1f} s: quadratic again? (about 1 s when linear, 2 minutes when not)"


def test_a_missing_link_in_the_middle_of_a_deep_chain_fails_with_ld_sos_message(linker, loader, graphs):
    top = write_graph(graphs / "broken", chain(1000), skip=["libchain500.so"])
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(str(top)),)))
    assert oracle.error_of(str(top)) == f"libchain500.so: {NOT_FOUND}"
    assert prediction.outcomes[-1].status == "failed"
    assert prediction.outcomes[-1].searches[-1].name == "libchain500.so"


def test_a_cycle_through_300_libraries_loads_each_once(linker, loader, graphs):
    edges = chain(300, prefix="libcycle")
    edges[-1] = (edges[-1][0], ["libcycle0.so"])
    top = write_graph(graphs / "cycle", edges)
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(str(top)),)))
    assert len(prediction.outcomes[-1].loaded) == 300


def test_one_library_needing_2000_others_loads_as_ld_so_loads_it(linker, loader, graphs):
    top = write_graph(graphs / "fan", fan_out(2000))
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(str(top)),)))
    assert len(prediction.outcomes[-1].loaded) == 2001


def test_a_dag_of_500_diamonds_loads_breadth_first_as_ld_so_does(linker, loader, graphs):
    top = write_graph(graphs / "dag", diamonds(500, span=4))
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(str(top)),)))
    assert list(prediction.outcomes[-1].loaded) == [str(graphs / "dag" / f"libdag{i}.so") for i in range(500)]


def test_a_deep_rpath_chain_searches_only_the_loaders_with_an_rpath(linker, loader, graphs):
    """DT_RPATH applies down the loader chain: every library finds the next through its own $ORIGIN."""
    top = write_graph(graphs / "rpath", chain(300, prefix="librp"), runpath=None, rpath="$ORIGIN")
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(str(top)),)))
    last = prediction.outcomes[-1].searches[-1]
    assert {a.search_list for a in last.attempts} == {"RPATH of " + str(graphs / "rpath" / "librp298.so")}
    assert last.attempts[-1].result is AttemptResult.FOUND


def test_a_deep_chain_found_through_ld_library_path_walks_no_rpath(linker, loader, graphs):
    directory = graphs / "plain"
    top = write_graph(directory, chain(300, prefix="libplain"), runpath=None)
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=str(directory)), (Dlopen(str(top)),)))
    assert {a.search_list for s in prediction.outcomes[-1].searches for a in s.attempts} == {"LD_LIBRARY_PATH"}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=40), max_size=6), st.lists(st.integers(0, 60), max_size=200),
       st.lists(st.integers(0, 5), max_size=8))
def test_the_scope_index_finds_the_same_exporters_as_one_membership_test_per_object(sets, queries, repeats):
    """`ScopeIndex.exporters` (one sorted index per scope) against np.isin per object, in scope order, each object
    once even where it is in two scope lists, objects that export none of the names left out."""
    objects = [SimpleNamespace(export_halves=(np.unique(np.array(s, dtype=np.uint32)), None)) for s in sets]
    halves = {id(o): o.export_halves for o in objects}
    scopes = [objects, [objects[i] for i in repeats if i < len(objects)]]
    q = np.array(queries, dtype=np.uint32)
    expected = [(o, np.isin(q, o.export_halves[0])) for o in objects]
    found = ScopeIndex(scopes, lambda o: halves[id(o)]).exporters(q)  # type: ignore[arg-type]
    assert [(id(o), mask.tolist()) for o, mask in found] == [(id(o), m.tolist()) for o, m in expected if m.any()]
