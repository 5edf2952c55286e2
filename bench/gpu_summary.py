"""One JSON summary of `bench/gpu.sh`'s run: each figure of docs/benchmarks.md "On a GPU" against its target.

    python bench/gpu_summary.py bench-gpu        # reads bench-gpu/*.json, writes bench-gpu/summary.json

A figure whose bench failed or wrote no JSON is recorded as null with the bench's exit status, never guessed.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

# (figure, bench file, keys into its JSON, comparison, target): the GPU targets of docs/benchmarks.md, one row each.
TARGETS = [
    ("extract end-to-end / bare forward, 1,000 records", "extract", ("ratios", "end_to_end/bare_forward"), ">=", 0.8),
    ("extract end-to-end / bare forward, all records", "extract_all", ("ratios", "end_to_end/bare_forward"), ">=", 0.8),
    ("extract bf16 / fp32 end-to-end, 1,000 records", "extract", ("ratios", "bf16/fp32"), ">=", 1.0),
    ("extract bf16 / fp32 end-to-end, all records", "extract_all", ("ratios", "bf16/fp32"), ">=", 1.0),
    ("extract bf16 / fp32, all records, padded to 64", "extract_padded", ("ratios", "bf16/fp32"), ">=", 1.0),
    ("probe batched / separate, fp32", "probe_fp32", ("comparisons", -1, "speedup"), ">=", 20.0),
    ("probe batched / separate, bf16", "probe_bf16", ("comparisons", -1, "speedup"), ">=", 20.0),
    ("probe step / GEMM limit, fp32, 200k", "probe_fp32", ("comparisons", -1, "step_vs_gemm_limit"), "<=", 2.0),
    ("probe step / GEMM limit, bf16, 200k", "probe_bf16", ("comparisons", -1, "step_vs_gemm_limit"), "<=", 2.0),
    ("tree probe step / products", "tree_probe", ("step_vs_bare",), "<=", 3.0),
    ("erase / read, bundled sample", "erase", ("erase_vs_read",), "<=", 2.0),
    ("erase / read, EWT dev", "erase_ewt", ("erase_vs_read",), "<=", 2.0),
    ("fine-tuning bf16 / fp32 sentences/s", "finetune", ("bf16_over_fp32",), ">=", 1.0),
]


def figure_at(data: Any, path: tuple) -> float | None:
    """The number at `path` in a bench's JSON, or None where the path is absent."""
    for key in path:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data if isinstance(data, int | float) else None


def read_json(path: Path) -> Any:
    """A bench's JSON, or None where the bench wrote none."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def target_rows(folder: Path) -> list[dict]:
    """Each target's figure, whether it is met, and the bench's exit status and seconds."""
    rows = []
    for figure, bench, path, comparison, target in TARGETS:
        value = figure_at(read_json(folder / f"{bench}.json"), path)
        met = None if value is None else (value >= target if comparison == ">=" else value <= target)
        rows.append({"figure": figure, "bench": bench, "value": value, "target": f"{comparison} {target}", "met": met,
                     "status": read_json(folder / f"{bench}.status.json")})
    return rows


def pytest_counts(folder: Path) -> dict | None:
    """Passed, failed, skipped and errors of `pytest -m gpu` from its JUnit XML."""
    report = folder / "pytest_gpu.xml"
    if not report.is_file():
        return None
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "bench-gpu")
    if not folder.is_dir():
        print(f"error: {folder} is not a folder of bench/gpu.sh's output. Fix: give the folder it wrote (bench-gpu, "
              "or GPU_BENCH_DIR)", file=sys.stderr)
        sys.exit(2)
    device = folder / "device.txt"
    summary = {
        "device": device.read_text(encoding="utf-8").strip() if device.is_file() else None,
        "targets": target_rows(folder),
        "pytest_gpu": pytest_counts(folder),
        "quickstart": read_json(folder / "quickstart.status.json"),
        "steps": {path.name.removesuffix(".status.json"): read_json(path)
                  for path in sorted(folder.glob("*.status.json"))},
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    for row in summary["targets"]:
        verdict = {True: "met", False: "NOT met", None: "no figure"}[row["met"]]
        print(f"{row['figure']:<52} {row['value']!s:>8}  target {row['target']:<7} {verdict}")
    print(f"pytest -m gpu: {summary['pytest_gpu']}; quickstart: {summary['quickstart']}")
    print(f"summary: {folder / 'summary.json'}")


if __name__ == "__main__":
    main()
