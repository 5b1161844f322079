"""customops against the tools it replaces, side by side in one run.

    .venv/bin/python benchmarks/bench.py            # real framework libraries (torch, tensorflow-cpu)
    .venv/bin/python benchmarks/bench.py --quick    # fixture libraries only (the smoke test runs this)

Every command runs as its own process, `--runs` times (median reported), with the files already in the
page cache. "cold" = an empty customops cache directory, "warm" = the same directory after one run.
Peak RSS is the child's own (os.wait4). customops' bytecode is compiled first, as installing a wheel
does: from a source checkout with PYTHONDONTWRITEBYTECODE set, every run would compile each module again
(~0.1 s of every customops command). Ratios are customops / peer; lower is better. Results are
printed as a Markdown table and written to benchmarks/out/results.json. The chain section resolves
DT_NEEDED chains of 250 to 5,000 tiny libraries against the real ld.so loading them.
"""

from __future__ import annotations

import argparse
import atexit
import compileall
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache, partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot import write_plot  # benchmarks/plot.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
CUSTOMOPS = [sys.executable, "-m", "customops"]
ASIDE = tempfile.mkdtemp(prefix="customops-bench-aside-")  # caches emptied before cold runs (see set_aside)
atexit.register(shutil.rmtree, ASIDE, ignore_errors=True)


@dataclass
class Measurement:
    label: str
    seconds: float
    peak_rss_mb: float
    runs: list[float]


def run_once(argv: list[str]) -> tuple[float, float]:
    """Wall time and peak RSS of one child process; its output is discarded."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=devnull, cwd=ROOT)
        _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"benchmark command failed ({code}): {' '.join(argv)}")
    return elapsed, usage.ru_maxrss / 1024


def measure(label: str, argv: list[str], runs: int, before=None) -> Measurement:  # type: ignore[no-untyped-def]
    times, rss = [], []
    for _ in range(runs):
        if before:
            before()
        seconds, peak = run_once(argv)
        times.append(seconds)
        rss.append(peak)
    return Measurement(label, statistics.median(times), max(rss), times)


def set_aside(directory: str | Path) -> None:
    """Empty a cache, or drop a section's files, by renaming the directory away (removed when the benchmark
    ends): deleting thousands of files just before a run made the run's own file creations wait on the disk
    (a chain of 5,000 libraries: 3.5 s cold after a rename, 6.6 s after a delete, on the benchmark's VM)."""
    if os.path.exists(directory):
        os.rename(directory, tempfile.mkdtemp(dir=ASIDE) + "/set-aside")


def warm_page_cache(files: list[str]) -> None:
    for path in files:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def package_file(module: str, *parts: str) -> str | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return str(path) if path.exists() else None


def scan_rows(files: list[str], runs: int) -> list[dict]:
    rows = []
    for path in files:
        warm_page_cache([path])
        cache = tempfile.mkdtemp(prefix="customops-bench-")
        fresh = partial(set_aside, cache)
        scan = [*CUSTOMOPS, "scan", "--format", "json", "--cache-dir", cache, path]
        cold = measure("customops scan (cold)", scan, runs, before=fresh)
        warm = measure("customops scan (warm)", scan, runs)
        nm = measure("nm -D --defined-only", ["nm", "-D", "--defined-only", path], runs)
        readelf = measure("readelf -W --dyn-syms", ["readelf", "-W", "--dyn-syms", path], runs)
        set_aside(cache)
        rows.append({"file": Path(path).name, "size_mb": round(os.path.getsize(path) / 2**20, 1),
                     "measurements": [asdict(m) for m in (cold, warm, nm, readelf)],
                     "cold_vs_nm": cold.seconds / nm.seconds, "warm_vs_nm": warm.seconds / nm.seconds,
                     "cold_vs_readelf": cold.seconds / readelf.seconds})
    return rows


def resolve_rows(libraries: list[str], runs: int) -> list[dict]:
    """Resolve a library with all its dependencies vs nm over exactly the files the model loaded. The file
    list comes from a child process: this process stays small, since a forked child's peak RSS counts the
    parent's pages from before exec."""
    rows = []
    for lib in libraries:
        listing = subprocess.run([*CUSTOMOPS, "resolve", "--no-cache", "--format", "json", "--dlopen", lib],
                                 capture_output=True, text=True, cwd=ROOT)
        files = [os.path.realpath(o["name"]) for o in json.loads(listing.stdout)["objects"]]
        warm_page_cache(files)
        cache = tempfile.mkdtemp(prefix="customops-bench-")
        fresh = partial(set_aside, cache)
        resolve = [*CUSTOMOPS, "resolve", "--cache-dir", cache, "--dlopen", lib]
        cold = measure("customops resolve (cold)", resolve, runs, before=fresh)
        warm = measure("customops resolve (warm)", resolve, runs)
        # what the tree tools do: load, search, check versions, bind nothing (it reads and writes no cache)
        tree = measure("customops resolve --tree-only", [*CUSTOMOPS, "resolve", "--tree-only", "--dlopen", lib], runs)
        nm = measure("nm -D --defined-only (same files)", ["nm", "-D", "--defined-only", *files], runs)
        peers = [measure(label, argv, runs) for label, argv in tree_tools(lib)]
        set_aside(cache)
        rows.append({"file": Path(lib).name, "objects": len(files),
                     "measurements": [asdict(m) for m in (cold, warm, tree, nm, *peers)],
                     "cold_vs_nm": cold.seconds / nm.seconds, "warm_vs_nm": warm.seconds / nm.seconds,
                     "peers": {m.label: {"cold": cold.seconds / m.seconds, "warm": warm.seconds / m.seconds,
                                         "tree_only": tree.seconds / m.seconds} for m in peers}})
    return rows


def tree_tools(library: str) -> list[tuple[str, list[str]]]:
    """libtree and lddtree (pax-utils; Debian's runs with the system Python, which has pyelftools), where installed:
    they walk the same DT_NEEDED tree; neither binds a symbol."""
    found = []
    if shutil.which("libtree"):
        found.append(("libtree", ["libtree", library]))
    if shutil.which("lddtree") and subprocess.run(["/usr/bin/python3", "-c", "import elftools"],
                                                  capture_output=True).returncode == 0:
        found.append(("lddtree", ["/usr/bin/python3", shutil.which("lddtree") or "lddtree", library]))
    return found


def probe_rows(runs: int) -> list[dict]:
    """probe --framework torch of the fixture op libraries, each alone (one sandbox, torch imported once), vs one
    interpreter importing torch and loading them (what the libraries cost at the least)."""
    from fixtures import torch_ops

    directory = torch_ops.build()
    libraries = [str(directory / f"lib{name}.so") for name in torch_ops.NAMES]
    probe = measure(f"customops probe --framework torch ({len(libraries)} libraries, each alone)",
                    [*CUSTOMOPS, "probe", "--framework", "torch", *libraries], runs)
    load = ("import sys, torch\nfor path in sys.argv[1:]:\n    try:\n        torch.ops.load_library(path)\n"
            "    except Exception:\n        pass\n")
    # labops_b aborts after labops_a (a second TORCH_LIBRARY of one namespace, which the probe reports): the floor
    # loads the libraries that load together
    floor = measure("python: import torch, then torch.ops.load_library of each that loads with the others",
                    [sys.executable, "-c", load, *(lib for lib in libraries if "labops_b" not in lib)], runs)
    return [{"file": f"{len(libraries)} Torch op libraries", "measurements": [asdict(probe), asdict(floor)],
             "probe_vs_import": probe.seconds / floor.seconds}]


def config_rows(tree: Path, sizes_kb: list[int], runs: int, out: Path) -> list[dict]:
    """check of one model whose config.pbtxt is `size` KB of inputs (up to customops' 4 MiB limit for a config)."""
    rows = []
    entry = 'input {{\n  name: "in{}"\n  data_type: TYPE_FP32\n  dims: [ 1, 3, 224, 224 ]\n}}\n'
    for size in sizes_kb:
        repo = Path(tempfile.mkdtemp(prefix="customops-config-")) / "models"
        (repo / "m" / "1").mkdir(parents=True)
        (repo / "m" / "1" / "model.onnx").write_bytes(b"\0")
        parts, total = ['backend: "onnxruntime"\nmax_batch_size: 8\n'], 0
        while total < size * 1024 - 200:
            parts.append(entry.format(len(parts)))
            total += len(parts[-1])
        (repo / "m" / "config.pbtxt").write_text("".join(parts))
        check = [*CUSTOMOPS, "check", str(repo), "--container-root", str(tree / "container"), "--format", "json",
                 "--no-cache"]
        cold = measure(f"check, {size} KB config", check, runs)
        rows.append({"config_kb": size, "check": cold.seconds, "peak_rss_mb": cold.peak_rss_mb})
        set_aside(repo.parent)
    write_plot(rows, out, "config_kb", ("check",), "customops check time vs config.pbtxt size", "config.pbtxt KB")
    return rows


def chain_rows(loader: Path, depths: list[int], runs: int, out: Path) -> list[dict]:
    """A chain of N tiny libraries (lib0 needs lib1 needs lib2 ...): customops resolve of lib0 vs the real ld.so
    dlopen()ing it (the fixture loader, RTLD_NOW), the same process the model simulates."""
    from fixtures.chain import chain, write_graph

    rows = []
    for depth in depths:
        directory = Path(tempfile.mkdtemp(prefix="customops-chain-"))
        top = str(write_graph(directory, chain(depth)))
        warm_page_cache([str(p) for p in directory.iterdir()])
        cache = tempfile.mkdtemp(prefix="customops-bench-")
        fresh = partial(set_aside, cache)
        resolve = [*CUSTOMOPS, "resolve", "--host", str(loader), "--cache-dir", cache, "--dlopen", top]
        cold = measure(f"customops resolve, chain of {depth} (cold)", resolve, runs, before=fresh)
        warm = measure(f"customops resolve, chain of {depth} (warm)", resolve, runs)
        # the model alone: for files this small, writing and reading parse-cache entries costs more than parsing
        uncached = measure(f"customops resolve --no-cache, chain of {depth}",
                           [*CUSTOMOPS, "resolve", "--host", str(loader), "--no-cache", "--dlopen", top], runs)
        ld_so = measure(f"ld.so: dlopen of a chain of {depth}", [str(loader), top], runs)
        set_aside(cache)
        set_aside(directory)
        rows.append({"depth": depth, "measurements": [asdict(m) for m in (cold, warm, uncached, ld_so)],
                     "cold_vs_ld_so": cold.seconds / ld_so.seconds, "warm_vs_ld_so": warm.seconds / ld_so.seconds,
                     "uncached_vs_ld_so": uncached.seconds / ld_so.seconds, "cold": cold.seconds,
                     "warm": warm.seconds, "uncached": uncached.seconds, "ld.so": ld_so.seconds})
    write_plot(rows, out, "depth", ("cold", "warm", "uncached", "ld.so"), "resolve of a DT_NEEDED chain vs ld.so",
               "depth")
    return rows


def check_rows(root: Path, repo: Path, runs: int) -> list[dict]:
    """customops check of a repository against a container root vs `ldd -r` over the same libraries (the
    backend and custom libraries the check loads) with the backends on LD_LIBRARY_PATH."""
    listing = subprocess.run([*CUSTOMOPS, "check", str(repo), "--container-root", str(root), "--format", "json",
                              "--no-cache"], capture_output=True, text=True, cwd=ROOT)
    report = json.loads(listing.stdout)
    libraries = sorted({str(root) + s["path"] if s["path"].startswith("/opt/") else
                        str(repo / s["source"]) if not s["source"].startswith("/") else s["source"]
                        for s in report["plan"]["steps"]})
    libraries = [lib for lib in libraries if os.path.exists(lib)]
    backends = root / "opt/tritonserver/backends"
    library_path = ":".join(str(d) for d in sorted(backends.iterdir()) if d.is_dir())
    warm_page_cache([str(p) for p in backends.rglob("*.so*") if p.is_file()] + libraries)
    cache = tempfile.mkdtemp(prefix="customops-bench-")
    fresh = partial(set_aside, cache)
    check = [*CUSTOMOPS, "check", str(repo), "--container-root", str(root), "--format", "json", "--cache-dir", cache]
    cold = measure("customops check (cold)", check, runs, before=fresh)
    warm = measure("customops check (warm)", check, runs)
    ldd = measure("ldd -r (same libraries, LD_LIBRARY_PATH=backends)",
                  ["env", f"LD_LIBRARY_PATH={library_path}", "ldd", "-r", *libraries], runs)
    set_aside(cache)
    return [{"file": f"{repo.name} ({len(report['models'])} models, {len(libraries)} libraries)",
             "measurements": [asdict(m) for m in (cold, warm, ldd)], "cold_vs_ldd": cold.seconds / ldd.seconds}]


def scale_repository(tree: Path, n: int) -> Path:
    """N models sharing two op libraries (TensorFlow's and ONNX Runtime's), in a new temporary directory."""
    repo = Path(tempfile.mkdtemp(prefix="customops-scale-")) / "models"
    for lib in ("libtf_op.so", "libort_op.so"):
        (repo / "shared").mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / "example" / lib, repo / "shared" / lib)
    (repo / "shared" / "1").mkdir()
    (repo / "shared" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    for i in range(n - 1):
        backend, lib = ("tensorflow", "libtf_op.so") if i % 2 else ("onnxruntime", "libort_op.so")
        (repo / f"m{i}" / "1").mkdir(parents=True)
        (repo / f"m{i}" / "config.pbtxt").write_text(
            f'backend: "{backend}"\nmodel_operations {{ op_library_filename: "/models/shared/{lib}" }}\n')
    return repo


def matrix_rows(tree: Path, models: int, runs: int) -> list[dict]:
    """#32: the upgrade matrix of twelve releases over the scale repository vs one release's check of it, in
    alternation (cold: --no-cache, so neither answers from the report cache)."""
    repo = scale_repository(tree, models)
    argv = [*CUSTOMOPS, "check", str(repo), "--no-cache", "--format", "json", "--triton-release"]
    measured: dict[str, list[tuple[float, float]]] = {"matrix": [], "one": []}
    for _ in range(runs):
        measured["matrix"].append(run_once([*argv, "25.01..25.12"]))
        measured["one"].append(run_once([*argv, "25.12"]))
    set_aside(repo.parent)
    matrix, one = (sorted(measured[k])[len(measured[k]) // 2] for k in ("matrix", "one"))
    return [{"models": models, "releases": 12, "matrix_seconds": matrix[0], "one_seconds": one[0],
             "matrix_peak_rss_mb": matrix[1], "one_peak_rss_mb": one[1], "ratio": matrix[0] / one[0],
             "runs": {k: [round(t, 3) for t, _ in v] for k, v in measured.items()}}]


def scale_rows(tree: Path, sizes: list[int], runs: int, out: Path) -> list[dict]:
    """Repositories of N models sharing two op libraries: time must follow distinct libraries, not models."""
    rows = []
    for n in sizes:
        repo = scale_repository(tree, n)
        cache = tempfile.mkdtemp(prefix="customops-bench-")
        check = [*CUSTOMOPS, "check", str(repo), "--container-root", str(tree / "container"), "--format", "json",
                 "--cache-dir", cache]
        cold = measure(f"check, {n} models (cold)", check, runs, before=partial(set_aside, cache))
        warm = measure(f"check, {n} models (warm)", check, runs)
        rows.append({"models": n, "cold": cold.seconds, "warm": warm.seconds, "peak_rss_mb": cold.peak_rss_mb})
        set_aside(repo.parent)
        set_aside(cache)
    write_plot(rows, out, "models", ("cold", "warm"), "customops check time vs models (shared libraries)", "models")
    return rows


def profile_rows(root: Path, runs: int) -> list[dict]:
    """profile create of the container the check section checks (its whole library tree, compressed)."""
    out = Path(tempfile.mkdtemp(prefix="customops-profile-")) / "profile.json"
    made = measure("customops profile create", [*CUSTOMOPS, "profile", "create", "--container-root", str(root), "-o",
                                                str(out)], runs)
    size = out.stat().st_size / 2**20
    shutil.rmtree(out.parent, ignore_errors=True)
    return [{"file": f"{root.name} ({size:.1f} MB profile)", "measurements": [asdict(made)]}]


def launch_rows(root: Path, repo: Path, runs: int) -> list[dict]:
    """Warm `customops launch --dry-run` minus a bare interpreter start."""
    cache = tempfile.mkdtemp(prefix="customops-bench-")
    argv = [*CUSTOMOPS, "launch", "--container-root", str(root), "--mount", f"{repo}:/models", "--warn-only",
            "--dry-run", "--", "tritonserver", "--model-repository=/models"]
    env_argv = ["env", f"CUSTOMOPS_CACHE_DIR={cache}", *argv]
    run_once(env_argv)  # populate
    warm = measure("customops launch --dry-run (warm)", env_argv, runs)
    bare = measure("python -c pass", [sys.executable, "-c", "pass"], runs)
    set_aside(cache)
    return [{"file": repo.name, "measurements": [asdict(warm), asdict(bare)],
             "overhead_ms": (warm.seconds - bare.seconds) * 1000}]


def _blob(layout: Path, data_path: Path) -> tuple[str, int]:
    """Move a file into the layout's blobs under its digest: (digest, size)."""
    import hashlib

    digest = hashlib.sha256()
    with open(data_path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    size = data_path.stat().st_size
    os.rename(data_path, blobs / digest.hexdigest())
    return f"sha256:{digest.hexdigest()}", size


def image_layout(root: Path, filler_mb: int, work: Path) -> tuple[Path, list[Path]]:
    """An OCI layout of three gzip -1 layers, written as streams (never held in memory): the container root, a
    layer whiting out one backend library, and `filler_mb` of incompressible files; (the layout, its layer blobs)."""
    import tarfile

    filler = work / "filler"
    filler.mkdir(parents=True)
    for n in range(max(1, filler_mb // 64)):
        with open(filler / f"data{n}.bin", "wb") as f:
            for _ in range(min(64, filler_mb)):
                f.write(os.urandom(1 << 20))
    whiteout = work / "whiteout"
    victim = next(p for p in sorted((root / "opt/tritonserver/backends").rglob("*.so*")) if p.is_file())
    relative = victim.relative_to(root)
    (whiteout / relative.parent).mkdir(parents=True)
    (whiteout / relative.parent / f".wh.{relative.name}").write_bytes(b"")
    layout = work / "layout"
    diff_ids, layers = [], []
    for n, (source, under) in enumerate(((root, ""), (whiteout, ""), (filler, "opt/filler"))):
        tar = work / f"layer{n}.tar"
        with tarfile.open(tar, "w") as archive:
            for entry in sorted(source.iterdir()):
                archive.add(entry, arcname=f"{under}/{entry.name}" if under else entry.name)
        diff_ids.append(_blob(work, tar)[0])
        (work / "blobs/sha256" / diff_ids[-1].split(":")[1]).rename(tar)
        subprocess.run(["gzip", "-1", "-f", str(tar)], check=True)
        layers.append(_blob(layout, Path(f"{tar}.gz")))
    config = work / "config.json"
    config.write_text(json.dumps({"architecture": "amd64", "os": "linux", "config": {
        "Env": ["PATH=/usr/bin:/bin"], "WorkingDir": "/opt/tritonserver"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids}}))
    config_digest, config_size = _blob(layout, config)
    manifest = work / "manifest.json"
    manifest.write_text(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                               "digest": config_digest, "size": config_size},
                                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                                "digest": d, "size": size} for d, size in layers]}))
    manifest_digest, manifest_size = _blob(layout, manifest)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
         "size": manifest_size, "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}))
    shutil.rmtree(filler)
    shutil.rmtree(whiteout)
    return layout, [layout / "blobs/sha256" / d.split(":")[1] for d, _ in layers]


def image_rows(root: Path, repo: Path, filler_mb: int, runs: int) -> list[dict]:
    """check --image against the I/O floor, `tar -tzf` over the same layer blobs (every byte of a layer read and
    decompressed once); the same image as an OCI archive on a pipe (read front to back); warm against the same
    check against a profile made from the image. Peak RSS shows memory does not follow the image's size."""
    work = Path(tempfile.mkdtemp(prefix="customops-image-"))
    layout, blobs = image_layout(root, filler_mb, work)
    archive = work / "image.tar"
    subprocess.run(["tar", "-cf", str(archive), "-C", str(layout), "."], check=True)
    gib = sum(b.stat().st_size for b in blobs) / 2**30
    cache = work / "cache"
    fresh = partial(set_aside, cache)
    check = [*CUSTOMOPS, "check", str(repo), "--image", f"oci:{layout}", "--format", "json", "--cache-dir", str(cache)]
    piped = ["sh", "-c", f'exec "$@" < {archive}', "sh", *CUSTOMOPS, "check", str(repo), "--image",
             "oci-archive:/dev/stdin", "--format", "json", "--cache-dir", str(cache)]
    tar = ["sh", "-c", 'for b in "$@"; do tar -tzf "$b" > /dev/null || exit 2; done', "sh", *map(str, blobs)]
    cold, floor, streamed = [], [], []
    for _ in range(runs):  # alternating, so that both sides share whatever else the machine does
        fresh()
        cold.append(run_once(check))
        floor.append(run_once(tar))
        fresh()
        streamed.append(run_once(piped))
    profile = work / "profile.json"
    run_once([*CUSTOMOPS, "profile", "create", "--image", f"oci:{layout}", "-o", str(profile)])
    run_once(check)
    warm = measure("check --image (warm)", check, runs)
    against_profile = measure("check --profile of the image (warm)", [*CUSTOMOPS, "check", str(repo), "--profile",
                                                                       str(profile), "--format", "json",
                                                                       "--cache-dir", str(cache)], runs)

    def median(measured: list[tuple[float, float]], label: str) -> Measurement:
        return Measurement(label, statistics.median(t for t, _ in measured), max(r for _, r in measured),
                           [t for t, _ in measured])

    rows = [median(cold, "check --image oci:DIR (cold)"), median(floor, "tar -tzf over its layer blobs"),
            median(streamed, "check --image oci-archive:/dev/stdin (cold, piped)"), warm, against_profile]
    shutil.rmtree(work, ignore_errors=True)
    return [{"file": f"{gib:.2f} GiB image (3 gzip layers)", "measurements": [asdict(m) for m in rows],
             "cold_vs_tar": rows[0].seconds / rows[1].seconds, "piped_vs_tar": rows[2].seconds / rows[1].seconds,
             "warm_vs_profile": warm.seconds / against_profile.seconds}]


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "date": time.strftime("%Y-%m-%d")}


def render(results: dict) -> str:
    m = results["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, {m['date']}; "
             f"median of {results['runs']} runs, page cache warm.", ""]
    lines += ["| file | command | median s | peak RSS MB |", "|---|---|---:|---:|"]
    for row in results["scan"] + results["resolve"]:
        for meas in row["measurements"]:
            lines.append(f"| {row['file']} | {meas['label']} | {meas['seconds']:.3f} | {meas['peak_rss_mb']:.0f} |")
    lines += ["", "| file | ratio | value |", "|---|---|---:|"]
    for row in results["scan"]:
        lines.append(f"| {row['file']} | scan cold / nm | {row['cold_vs_nm']:.2f}x |")
        lines.append(f"| {row['file']} | scan warm / nm | {row['warm_vs_nm']:.2f}x |")
        lines.append(f"| {row['file']} | scan cold / readelf | {row['cold_vs_readelf']:.2f}x |")
    for row in results["resolve"]:
        name = f"{row['file']} (+{row['objects'] - 1} objects)"
        lines.append(f"| {name} | resolve cold / nm | {row['cold_vs_nm']:.2f}x |")
        lines.append(f"| {name} | resolve warm / nm | {row['warm_vs_nm']:.2f}x |")
    for row in results["check"]:
        lines.append(f"| {row['file']} | check cold / ldd -r | {row['cold_vs_ldd']:.2f}x |")
    for row in results["resolve"]:
        for peer, ratio in row["peers"].items():
            lines.append(f"| {row['file']} | resolve cold / {peer} | {ratio['cold']:.2f}x |")
            lines.append(f"| {row['file']} | resolve warm / {peer} | {ratio['warm']:.2f}x |")
            lines.append(f"| {row['file']} | resolve --tree-only / {peer} | {ratio['tree_only']:.2f}x |")
    for row in results["probe"]:
        lines.append(f"| {row['file']} | probe / (import torch + loads) | {row['probe_vs_import']:.2f}x |")
    for row in results["launch"]:
        lines.append(f"| launch | warm --dry-run minus python -c pass | {row['overhead_ms']:.0f} ms |")
    for row in results["matrix"]:
        lines.append(f"| {row['models']} models | check --triton-release of {row['releases']} releases / one release "
                     f"| {row['ratio']:.2f}x |")
    for row in results["image"]:
        lines.append(f"| {row['file']} | check --image cold / tar -tzf | {row['cold_vs_tar']:.2f}x |")
        lines.append(f"| {row['file']} | check --image piped cold / tar -tzf | {row['piped_vs_tar']:.2f}x |")
        lines.append(f"| {row['file']} | check --image warm / check --profile warm | {row['warm_vs_profile']:.2f}x |")
    lines += ["", "| chain depth | resolve cold s | resolve warm s | --no-cache s | ld.so s | cold / ld.so "
              "| warm / ld.so | --no-cache / ld.so | peak RSS MB |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in results["chain"]:
        cold, warm, uncached, ld_so = row["measurements"]
        lines.append(f"| {row['depth']} | {cold['seconds']:.3f} | {warm['seconds']:.3f} | {uncached['seconds']:.3f} | "
                     f"{ld_so['seconds']:.3f} | {row['cold_vs_ld_so']:.2f}x | {row['warm_vs_ld_so']:.2f}x | "
                     f"{row['uncached_vs_ld_so']:.2f}x | {cold['peak_rss_mb']:.0f} |")
    lines += ["", "| models | check cold s | check warm s | peak RSS MB |", "|---:|---:|---:|---:|"]
    for row in results["scale"]:
        lines.append(f"| {row['models']} | {row['cold']:.3f} | {row['warm']:.3f} | {row['peak_rss_mb']:.0f} |")
    lines += ["", "| config.pbtxt KB | check s | peak RSS MB |", "|---:|---:|---:|"]
    lines += [f"| {row['config_kb']} | {row['check']:.3f} | {row['peak_rss_mb']:.0f} |" for row in results["config"]]
    extra = [("check", m) for row in results["check"] for m in row["measurements"]]
    extra += [("probe", m) for row in results["probe"] for m in row["measurements"]]
    extra += [(f"profile of {row['file']}", m) for row in results["profile"] for m in row["measurements"]]
    extra += [("launch", m) for row in results["launch"] for m in row["measurements"]]
    extra += [(f"image: {row['file']}", m) for row in results["image"] for m in row["measurements"]]
    lines += ["", "| section | command | median s | peak RSS MB |", "|---|---|---:|---:|"]
    lines += [f"| {section} | {m['label']} | {m['seconds']:.3f} | {m['peak_rss_mb']:.0f} |" for section, m in extra]
    return "\n".join(lines)


def real_repository(tree: Path) -> tuple[Path, Path]:
    """The container from the real wheels, and a repository using published op libraries in it."""
    from fixtures import real_container

    base = Path(tempfile.mkdtemp(prefix="customops-real-"))
    root = real_container.assemble(tree, base / "root")
    repo = base / "models"
    text = real_container.package("tensorflow_text")
    ops = [("tf_ngrams", "tensorflow", text / "python/ops/_ngrams_op.so") if text else None,
           ("tf_normalize", "tensorflow", text / "python/ops/_normalize_ops.so") if text else None,
           ("ort_c10", "onnxruntime", real_container.package("torch") / "lib/libc10.so")]
    for entry in filter(None, ops):
        name, backend, lib = entry
        real_container.place(lib, repo / name / "ops" / lib.name)
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            f'backend: "{backend}"\nmodel_operations {{ op_library_filename: "/models/{name}/ops/{lib.name}" }}\n')
    aoti = real_container.package("torch") / "lib/libaoti_custom_ops.so"
    real_container.place(aoti, repo / "pt" / "ops" / aoti.name)
    (repo / "pt" / "1").mkdir(parents=True)
    (repo / "pt" / "config.pbtxt").write_text('backend: "pytorch"\n')
    (repo / "customops.toml").write_text(f'[pytorch]\nops = ["pt/ops/{aoti.name}"]\n')
    shutil.copytree(repo, root / "models")
    return root, root / "models"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fixture libraries only (seconds, no frameworks)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "results.json")
    parser.add_argument("--image-mb", type=int, help="MB of incompressible filler in the image section's image "
                        "(default: 1024; --quick: 64); 10240 gives #31's 10 GB image")
    parser.add_argument("--only", action="append", metavar="SECTION",
                        help="run only this section (repeatable): scan, resolve, check, chain, scale, matrix, config, "
                        "probe, profile, launch, image")
    args = parser.parse_args(argv)
    compileall.compile_dir(ROOT / "customops", quiet=1)
    sys.path.insert(0, str(ROOT))
    from fixtures.build import build
    from fixtures.example import install

    tree = build()
    example = Path(tempfile.mkdtemp(prefix="customops-example-")) / "model_repository"
    shutil.copytree(ROOT / "examples" / "model_repository", example, ignore=shutil.ignore_patterns("*.so"))
    install(example)
    check_root: Path | None
    check_repo: Path | None
    if args.quick:
        scan_files = [str(tree / "e/libvuser.so")]
        resolve_libs = [str(tree / "bfs/libtop.so")]
        check_root, check_repo = tree / "container", example
        sizes = [10, 20]
        depths = [250, 1000]
        config_kb = [16, 64]
    else:
        candidates = [package_file("tensorflow", "libtensorflow_cc.so.2"),
                      package_file("torch", "lib", "libtorch_cpu.so")]
        scan_files = [c for c in candidates if c]
        resolve_libs = scan_files[:1]
        if not scan_files:
            raise SystemExit("install torch==2.13.0 and tensorflow-cpu (./scripts/test.sh does) or use --quick")
        check_root = check_repo = None  # built only for the sections that check them (real_repository)
        sizes = [10, 100, 1000, 10000]
        depths = [250, 1000, 2500, 5000]
        config_kb = [256, 1024, 2048, 4000]
    @cache
    def checked() -> tuple[Path, Path]:
        return (check_root, check_repo) if check_root and check_repo else real_repository(tree)

    sections: dict[str, Callable[[], list[dict]]] = {
        "scan": lambda: scan_rows(scan_files, args.runs),
        "resolve": lambda: resolve_rows(resolve_libs, args.runs),
        "check": lambda: check_rows(*checked(), args.runs),
        "chain": lambda: chain_rows(tree / "bin" / "loader", depths, args.runs, args.out.parent / "chain.svg"),
        "scale": lambda: scale_rows(tree, sizes, max(1, min(args.runs, 3)), args.out.parent / "scale.svg"),
        "matrix": lambda: matrix_rows(tree, 100 if args.quick else 1000, args.runs),
        "config": lambda: config_rows(tree, config_kb, max(1, min(args.runs, 3)), args.out.parent / "config.svg"),
        "probe": lambda: [] if args.quick else probe_rows(args.runs),
        "profile": lambda: profile_rows(checked()[0], args.runs),
        "launch": lambda: launch_rows(tree / "container", example, args.runs),
        "image": lambda: image_rows(*checked(), args.image_mb or (64 if args.quick else 1024),
                                    max(1, min(args.runs, 3)))}
    chosen = set(args.only or sections)
    results: dict = {"machine": machine(), "runs": args.runs,
                     **{name: run() if name in chosen else [] for name, run in sections.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
