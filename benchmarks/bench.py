"""customops against the tools it replaces, side by side in one run.

    .venv/bin/python benchmarks/bench.py            # real framework libraries (torch, tensorflow-cpu)
    .venv/bin/python benchmarks/bench.py --quick    # fixture libraries only (the smoke test runs this)

Every command runs as its own process, `--runs` times (median reported), with the files already in the
page cache. "cold" = an empty customops cache directory, "warm" = the same directory after one run.
Peak RSS is the child's own (os.wait4). Ratios are customops / peer; lower is better. Results are
printed as a Markdown table and written to benchmarks/out/results.json.
"""

from __future__ import annotations

import argparse
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
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CUSTOMOPS = [sys.executable, "-m", "customops"]


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
        fresh = partial(shutil.rmtree, cache, ignore_errors=True)
        scan = [*CUSTOMOPS, "scan", "--format", "json", "--cache-dir", cache, path]
        cold = measure("customops scan (cold)", scan, runs, before=fresh)
        warm = measure("customops scan (warm)", scan, runs)
        nm = measure("nm -D --defined-only", ["nm", "-D", "--defined-only", path], runs)
        readelf = measure("readelf -W --dyn-syms", ["readelf", "-W", "--dyn-syms", path], runs)
        shutil.rmtree(cache, ignore_errors=True)
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
        fresh = partial(shutil.rmtree, cache, ignore_errors=True)
        resolve = [*CUSTOMOPS, "resolve", "--cache-dir", cache, "--dlopen", lib]
        cold = measure("customops resolve (cold)", resolve, runs, before=fresh)
        warm = measure("customops resolve (warm)", resolve, runs)
        nm = measure("nm -D --defined-only (same files)", ["nm", "-D", "--defined-only", *files], runs)
        shutil.rmtree(cache, ignore_errors=True)
        rows.append({"file": Path(lib).name, "objects": len(files),
                     "measurements": [asdict(m) for m in (cold, warm, nm)],
                     "cold_vs_nm": cold.seconds / nm.seconds, "warm_vs_nm": warm.seconds / nm.seconds})
    return rows


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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fixture libraries only (seconds, no frameworks)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "results.json")
    args = parser.parse_args(argv)
    if args.quick:
        sys.path.insert(0, str(ROOT))
        from fixtures.build import build

        tree = build()
        scan_files = [str(tree / "e/libvuser.so")]
        resolve_libs = [str(tree / "bfs/libtop.so")]
    else:
        candidates = [package_file("tensorflow", "libtensorflow_cc.so.2"),
                      package_file("torch", "lib", "libtorch_cpu.so")]
        scan_files = [c for c in candidates if c]
        resolve_libs = scan_files[:1]
        if not scan_files:
            raise SystemExit("install torch==2.13.0 and tensorflow-cpu (./scripts/test.sh does) or use --quick")
    results = {"machine": machine(), "runs": args.runs, "scan": scan_rows(scan_files, args.runs),
               "resolve": resolve_rows(resolve_libs, args.runs)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
