"""Deep and wide DT_NEEDED graphs (issue #15): thousands of libraries load in time linear in their number,
with no recursion limit, and the model still agrees with the real ld.so on every load, binding and error.
The libraries are written by fixtures/chain.py (a few milliseconds for thousands)."""

import time

import pytest
from oracle import agree

from customops.scanners.linker import NOT_FOUND, Dlopen, Environment, Scenario
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
    assert {a.source for a in last.attempts} == {"RPATH of " + str(graphs / "rpath" / "librp298.so")}
    assert last.attempts[-1].result == "found"


def test_a_deep_chain_found_through_ld_library_path_walks_no_rpath(linker, loader, graphs):
    directory = graphs / "plain"
    top = write_graph(directory, chain(300, prefix="libplain"), runpath=None)
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=str(directory)), (Dlopen(str(top)),)))
    assert {a.source for s in prediction.outcomes[-1].searches for a in s.attempts} == {"LD_LIBRARY_PATH"}
