"""Library search (dl-load.c _dl_map_object): RPATH chain, LD_LIBRARY_PATH, RUNPATH, cache, system
directories, hwcaps subdirectories, dynamic string tokens, and which candidates are skipped."""

import io
import os

import pytest
from conftest import needs_toolchain
from oracle import agree
from rich.console import Console

from customops.linker.types import Dlopen, Environment, Scenario
from customops.report.resolve import render_prediction


def tried(paths):
    """Candidates in directories that exist. The model lists every candidate in order (libtree style);
    ld.so remembers directories it found missing and stops printing `trying file=` for them."""
    return [p for p in paths if os.path.isdir(os.path.dirname(p) or ".")]


def model_tried(prediction, name):
    return tried([a.path for o in prediction.outcomes for s in o.searches if s.name == name
                  for a in s.attempts if a.search_list != "ld.so.cache"])


def test_rpath_comes_before_ld_library_path(linker, loader, tree):
    user = f"{tree}/g/libuse_rpath.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/g/d_llp"),
                                           (Dlopen(user, calls=("call_where",)),)))
    assert prediction.binding(user, "where").winner.object == f"{tree}/g/d_rpath/libw.so"


def test_runpath_comes_after_ld_library_path(linker, loader, tree):
    user = f"{tree}/g/libuse_runpath.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/g/d_llp"),
                                           (Dlopen(user, calls=("call_where",)),)))
    assert prediction.binding(user, "where").winner.object == f"{tree}/g/d_llp/libw.so"


def test_runpath_is_not_inherited_by_indirect_dependencies(linker, loader, tree):
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(f"{tree}/g/i/libtop_runpath.so"),)))
    assert prediction.outcomes[-1].message == "libleaf.so: cannot open shared object file: No such file or directory"
    assert model_tried(prediction, "libleaf.so") == tried(oracle.tried["libleaf.so"])


def test_rpath_is_inherited_by_indirect_dependencies(linker, loader, tree):
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(f"{tree}/g/i/libtop_rpath.so"),)))
    assert prediction.outcomes[-1].ok


def test_the_rpath_chain_is_ignored_for_a_loader_that_has_runpath(linker, loader, tree):
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(f"{tree}/g/i/libtop_rpath2.so"),)))
    assert prediction.outcomes[-1].status == "failed"
    assert model_tried(prediction, "libleaf.so") == tried(oracle.tried["libleaf.so"])


def test_a_dependency_with_its_own_origin_runpath_finds_its_neighbours(linker, loader, tree):
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(f"{tree}/g/i/libtop_runpath3.so"),)))
    assert prediction.outcomes[-1].ok


@needs_toolchain("m32")
@needs_toolchain("aarch64")
def test_wrong_machine_and_wrong_class_candidates_are_skipped(linker, loader, tree):
    user = f"{tree}/g/libuse_bare.so"
    llp = f"{tree}/g/badm:{tree}/g/badc:{tree}/g/d_llp"
    prediction, oracle = agree(linker, Scenario(loader, Environment(library_path=llp),
                                                (Dlopen(user, calls=("call_where",)),)))
    assert prediction.binding(user, "where").winner.object == f"{tree}/g/d_llp/libw.so"
    assert model_tried(prediction, "libw.so") == tried(oracle.tried["libw.so"])


@needs_toolchain("m32")
def test_only_a_wrong_class_candidate_reports_wrong_elf_class(linker, loader, tree):
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/g/badc"),
                                           (Dlopen(f"{tree}/g/libuse_bare.so"),)))
    assert prediction.outcomes[-1].message == "libw.so: wrong ELF class: ELFCLASS32"


@needs_toolchain("aarch64")
def test_only_a_wrong_machine_candidate_reads_as_no_such_file(linker, loader, tree):
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/g/badm"),
                                           (Dlopen(f"{tree}/g/libuse_bare.so"),)))
    assert prediction.outcomes[-1].message == "libw.so: cannot open shared object file: No such file or directory"


def test_a_non_elf_file_on_the_search_path_is_a_hard_error(linker, loader, tree):
    llp = f"{tree}/g/txt:{tree}/g/d_llp"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=llp),
                                           (Dlopen(f"{tree}/g/libuse_bare.so"),)))
    assert prediction.outcomes[-1].status == "failed"


def test_semicolons_separate_ld_library_path_entries(linker, loader, tree):
    user = f"{tree}/g/libuse_bare.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"/nonexistent;{tree}/g/d_llp"),
                                           (Dlopen(user, calls=("call_where",)),)))
    assert prediction.binding(user, "where").winner.object == f"{tree}/g/d_llp/libw.so"


def test_an_empty_ld_library_path_entry_is_the_current_directory(linker, loader, tree):
    user = f"{tree}/g/libuse_bare.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(library_path=":", cwd=f"{tree}/g/d_llp"),
                                                (Dlopen(user, calls=("call_where",)),)))
    assert prediction.outcomes[-1].ok
    assert oracle.calls == [("call_where", "3")]


def test_an_empty_ld_library_path_is_no_list_at_all_not_the_current_directory(linker, loader, tree):
    """_dl_init_paths ignores an empty value; only an empty entry of a non-empty list means `.`."""
    prediction, oracle = agree(linker, Scenario(loader, Environment(library_path="", cwd=f"{tree}/g/d_llp"),
                                                (Dlopen(f"{tree}/g/libuse_bare.so", calls=("call_where",)),)))
    assert prediction.outcomes[-1].status == "failed" and oracle.calls == []


@pytest.mark.parametrize("value", [":{d}", "{d}:", "::{d}", ";{d}", "{d};;", " {d}"])
def test_ld_library_path_entries_empty_leading_trailing_and_semicolon_separated(linker, loader, tree, value):
    """Empty entries (leading, trailing, doubled `:` or `;`) are the working directory, `;` separates as `:`
    does, and a space is part of a directory's name: the model and ld.so agree on every form."""
    agree(linker, Scenario(loader, Environment(library_path=value.format(d=f"{tree}/g/d_llp"), cwd="/"),
                           (Dlopen(f"{tree}/g/libuse_bare.so", calls=("call_where",)),)))


@pytest.mark.parametrize("separator", [" ", ":", "  ", " : ", "\t", ";"])
def test_ld_preload_entries_separated_as_handle_preload_list_separates_them(linker, loader, tree, separator):
    """handle_preload_list splits at spaces and colons, skipping empty entries; a tab or `;` is part of a name
    (then no such file: ld.so warns and goes on)."""
    first, second = f"{tree}/g/d_llp/libw.so", f"{tree}/g/libuse_bare.so"
    agree(linker, Scenario(loader, Environment(preload=separator.join([first, second]),
                                               library_path=f"{tree}/g/d_llp"), ()))


def test_a_trailing_space_in_ld_library_path_is_part_of_the_directory(linker, loader, tree):
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/g/d_llp "),
                                           (Dlopen(f"{tree}/g/libuse_bare.so"),)))
    assert prediction.outcomes[-1].status == "failed"


def test_origin_of_a_library_is_the_directory_it_was_found_in_not_its_real_path(linker, loader, tree):
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(f"{tree}/g/s/b/libg.so"),
                                                          Dlopen(f"{tree}/g/s/a/libg.so"))))
    assert prediction.outcomes[-2].message == "libf.so: cannot open shared object file: No such file or directory"
    assert prediction.outcomes[-1].ok


def test_lib_token_expands_to_the_targets_library_directory(linker, loader, tree):
    lib = f"{tree}/g/dst/libdst.so"
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(lib, calls=("call_dst",)),)))
    assert prediction.binding(lib, "dst_fn").winner.object.startswith(f"{tree}/g/dst/x/lib/")


def test_a_glibc_hwcaps_subdirectory_wins_over_its_parent(linker, loader, tree):
    lib = f"{tree}/g/hw/libhwuser.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(lib, calls=("call_hw",)),)))
    assert "glibc-hwcaps" in prediction.binding(lib, "hw_fn").winner.object
    assert oracle.calls == [("call_hw", "2")]


def test_nodeflib_skips_the_cache_and_the_system_directories(linker, loader, tree):
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(f"{tree}/g/ndl/libnodeflib.so"),
                                                          Dlopen(f"{tree}/g/ndl/libdeflib.so"))))
    assert prediction.outcomes[-2].status == "failed"
    assert any("DF_1_NODEFLIB" in a.result for s in prediction.outcomes[-2].searches for a in s.attempts)


def test_the_targets_machine_and_class_are_read_from_its_own_programs(tmp_path):
    """A container root's machine (what its ld.so.cache entries must be for) comes from its tritonserver, else
    its /bin/sh: an AArch64 image is AArch64 whatever machine checks it; a root with neither has no answer."""
    import struct

    from customops.elf.constants import EM_AARCH64, ET_EXEC
    from customops.linker.target import machine_of, target_for_root

    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", ET_EXEC, EM_AARCH64, 1, 0, 64, 0, 0,
                                                               64, 56, 0, 64, 0, 0)
    server = tmp_path / "opt" / "tritonserver" / "bin" / "tritonserver"
    server.parent.mkdir(parents=True)
    assert machine_of(str(tmp_path)) is None
    server.write_bytes(header)
    assert machine_of(str(tmp_path)) == (EM_AARCH64, 64)
    (tmp_path / "usr" / "lib" / "aarch64-linux-gnu").mkdir(parents=True)
    target = target_for_root(str(tmp_path))
    assert (target.machine, target.elf_class) == (EM_AARCH64, 64)
    # its $PLATFORM and multiarch directories are AArch64's too, on whatever machine customops runs
    assert target.platform == "aarch64" and target.system_dirs[:2] == ("/lib/aarch64-linux-gnu",
                                                                       "/usr/lib/aarch64-linux-gnu")


def test_a_directory_named_like_a_dependency_on_the_search_path_is_a_hard_error(linker, loader, tree, tmp_path):
    """open_verify opens the directory (O_RDONLY succeeds) and fails reading its ELF header: the search stops
    there with `cannot read file data: Is a directory`, although a later directory has the library."""
    (tmp_path / "libw.so").mkdir()
    llp = f"{tmp_path}:{tree}/g/d_llp"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=llp),
                                           (Dlopen(f"{tree}/g/libuse_bare.so"),)))
    assert prediction.outcomes[-1].message == f"{tmp_path}/libw.so: cannot read file data: Is a directory"


def test_dlopen_of_a_directory_reads_as_unreadable_file_data(linker, loader, tmp_path):
    (tmp_path / "libbackend.so").mkdir()
    prediction, _ = agree(linker, Scenario(loader, Environment(), (Dlopen(f"{tmp_path}/libbackend.so"),)))
    assert prediction.outcomes[-1].message == f"{tmp_path}/libbackend.so: cannot read file data: Is a directory"


def test_a_preloaded_directory_is_ignored_with_a_warning(linker, loader, tree, tmp_path):
    (tmp_path / "libpre.so").mkdir()
    prediction, _ = agree(linker, Scenario(loader, Environment(preload=f"{tmp_path}/libpre.so"),
                                           (Dlopen(f"{tree}/g/libuse_bare.so"),)))
    assert prediction.outcomes[0].warnings


def rendered(linker, prediction) -> list[str]:
    console = Console(file=io.StringIO(), width=1000, no_color=True)
    render_prediction(prediction, linker.target, console)
    return console.file.getvalue().splitlines()


def test_resolve_shows_each_object_under_the_one_that_needed_it_with_the_search_list_that_found_it(
        linker, loader, tree):
    """libtree's view: `agree` compares every row (who needed it, the name, the file, the kind of search list)
    with ld.so's LD_DEBUG=files,libs; the label names the object whose RUNPATH was used, which ld.so's own
    debug output does not (it names the first object that put the directory on any search list)."""
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(f"{tree}/g/i/libtop_runpath3.so"),)))
    lines = rendered(linker, prediction)
    top = lines.index(f" loaded dlopen {tree}/g/i/libtop_runpath3.so")
    assert lines[top + 1:top + 3] == [
        f"         libmid.so => {tree}/g/i/dm3/libmid.so  (RUNPATH of {tree}/g/i/libtop_runpath3.so)",
        f"           libleaf.so => {tree}/g/i/dm3/libleaf.so  (RUNPATH of {tree}/g/i/dm3/libmid.so)",
    ]


def test_resolve_shows_the_program_its_preloads_and_its_interpreter_at_startup(linker, loader, tree):
    preload = f"{tree}/g/d_llp/libw.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(preload=preload)))
    lines = rendered(linker, prediction)
    startup = lines.index(f" loaded startup {loader}")
    assert lines[startup + 1] == f"         {preload}  (LD_PRELOAD)"
    assert lines[startup + 2].startswith("         libc.so.6 => /") and lines[startup + 2].endswith("  (ld.so.cache)")
    assert lines[startup + 3].endswith("  (the program's interpreter)")
