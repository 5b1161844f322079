"""The benchmark still runs (on tiny inputs, one run): it cannot rot. It asserts nothing about speed."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_benchmark_runs_on_fixture_libraries(tmp_path):
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--quick", "--runs", "1",
                             "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    results = json.loads(out.read_text())
    assert results["scan"] and results["resolve"]
    assert "| libvuser.so | scan cold / nm |" in result.stdout
