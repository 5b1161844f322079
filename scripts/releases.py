"""Regenerate customops/data/releases.json from the cited text kept under tests/data/releases/ (issue #32).

    python scripts/releases.py          # write the table
    python scripts/releases.py --check  # exit 1 when the table is not what the sources give

Every value comes from a line of a cited source, and names it: a release branch's server `build.py` (its version
map: the server, ONNX Runtime and OpenVINO versions; the CUDA keyring repository its DCGM step installs, which names
the image's Ubuntu; whether it builds the TensorFlow backend; the Python backend's Ubuntu libpython3-dev), or a line
of NVIDIA's release notes kept in `cited.tsv` (CUDA, and the components the notes list). A column no source states
is listed as unknown, never filled in. What follows from a value by a rule (glibc from Ubuntu, a library's SONAME
from a version) is derived in customops.triton.releases, from the Ubuntu and GCC facts kept here too, not typed
into the table.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "data" / "releases"
TABLE = ROOT / "customops" / "data" / "releases.json"
COLUMNS = ("server", "ubuntu", "python", "libpython3_dev", "cuda", "cublas", "cudnn", "nccl", "tensorrt", "onnxruntime",
           "openvino", "pytorch", "tensorflow", "tensorflow_backend", "dali")
KEYRING = re.compile(r"repos/ubuntu(\d\d)(\d\d)/x86_64/cuda-keyring")


def from_build_py(path: Path) -> tuple[str, dict[str, list]]:
    """(release, column -> [value, url, quote]) from one build.py excerpt."""
    lines = path.read_text().splitlines()
    url = lines[0].removeprefix("source: ")
    found: dict[str, list] = {}
    block = "\n".join(lines[1:lines.index("}") + 1])
    table = ast.literal_eval(block.split("=", 1)[1].strip())
    if "release_version" in table:  # 24.12 on: named fields
        fields = {"server": "release_version", "release": "triton_container_version", "onnxruntime": "ort_version",
                  "openvino": "standalone_openvino_version"}
        values = {column: table[key] for column, key in fields.items()}
        quote = {column: f'"{fields[column]}": "{values[column]}",' for column in fields}
    else:  # before: one tuple per server version
        ((server, row),) = table.items()
        values = {"server": server, "release": row[0], "onnxruntime": row[2], "openvino": row[4]}
        quote = {"server": next(line.strip() for line in lines if server in line),
                 "release": next(line.strip() for line in lines if "# triton container" in line),
                 "onnxruntime": next(line.strip() for line in lines if "# ORT" in line and "OpenVINO" not in line),
                 "openvino": next(line.strip() for line in lines if "# Standalone OpenVINO" in line)}
    for column in ("server", "onnxruntime", "openvino"):
        found[column] = [values[column], url, quote[column]]
    keyring = next((line for line in lines if KEYRING.search(line)), None)
    if keyring:
        match = KEYRING.search(keyring)
        assert match is not None
        found["ubuntu"] = [f"{match.group(1)}.{match.group(2)}", url, keyring.strip().rstrip("\\").strip()]
    tensorflow = next((line for line in lines if line.startswith("def tensorflow_cmake_args(")), None)
    found["tensorflow_backend"] = [tensorflow is not None, url,
                                   tensorflow or "(no tensorflow_cmake_args: the TensorFlow backend is not built)"]
    libpython = next((line for line in lines if line.startswith("libpython3-dev")), None)
    if libpython:  # the Python backend's apt-get line: Ubuntu's libpython3-dev, so its python3's libpython
        found["libpython3_dev"] = [True, url, libpython.rstrip("\\& ").strip()]
    assert values["release"] == path.stem, (path, values["release"])
    return path.stem, found


def from_cited(path: Path) -> dict[str, dict[str, list]]:
    """release -> column -> [value, url, quote], from cited.tsv (release, column, value, url, quote)."""
    found: dict[str, dict[str, list]] = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        release, column, value, url, quote = line.split("\t")
        assert column in COLUMNS, line
        assert value in quote or value.replace(".0", ".", 1) in quote, line
        found.setdefault(release, {})[column] = [value, url, quote]
    return found


def table() -> dict:
    rows: dict[str, dict] = {}
    for path in sorted((SOURCES / "build-py").glob("*.txt")):
        release, found = from_build_py(path)
        rows[release] = found
    for release, found in from_cited(SOURCES / "cited.tsv").items():
        row = rows.setdefault(release, {})
        for column, cited in found.items():
            if column in row and row[column][0] != cited[0]:
                raise SystemExit(f"{release} {column}: {row[column][0]} ({row[column][1]}) but {cited[0]} "
                                 f"({cited[1]})")
            row.setdefault(column, cited)
    releases = {}
    for release in sorted(rows, key=lambda r: tuple(map(int, r.split(".")))):
        found = rows[release]
        releases[release] = {
            **{column: found[column][0] for column in COLUMNS if column in found},
            "sources": {column: found[column][1:] for column in COLUMNS if column in found},
            "unknown": [column for column in COLUMNS if column not in found]}
    base = json.loads((SOURCES / "platform.json").read_text())
    return {"note": "Generated by scripts/releases.py from tests/data/releases/: every value with its source and the "
                    "line that states it; `unknown` lists what no cited source states for that release (never "
                    "guessed). `ubuntu` and `gcc` are the facts the derivations in customops/triton/releases.py read.",
            "releases": releases, **base}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the table differs from its sources")
    args = parser.parse_args()
    text = json.dumps(table(), indent=1, ensure_ascii=False) + "\n"
    if args.check:
        if TABLE.read_text() != text:
            print(f"{TABLE.relative_to(ROOT)} is not what its sources give: run scripts/releases.py", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text)
    print(f"wrote {TABLE.relative_to(ROOT)} ({len(json.loads(text)['releases'])} releases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
