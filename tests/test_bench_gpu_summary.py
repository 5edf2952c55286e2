"""bench/gpu_summary.py: the summary of a GPU bench run reads each bench's JSON, judges each figure against its
target, records a failed bench as no figure, and counts `pytest -m gpu` from its JUnit XML. Also: bench/gpu.sh
refuses at once, in one line, where there is no CUDA device."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import run_script

JUNIT = ('<testsuites><testsuite name="pytest" tests="13" failures="1" errors="0" skipped="2">'
         '</testsuite></testsuites>')


def test_the_summary_judges_each_figure_against_its_target(tmp_path):
    (tmp_path / "device.txt").write_text("GPU 0: NVIDIA H200\n")
    (tmp_path / "extract.json").write_text(json.dumps({"ratios": {"end_to_end/bare_forward": 0.85, "bf16/fp32": 0.5}}))
    (tmp_path / "probe_fp32.json").write_text(json.dumps({"comparisons": [
        {"speedup": 3.0, "step_vs_gemm_limit": 9.0}, {"speedup": 25.8, "step_vs_gemm_limit": 1.7}]}))
    (tmp_path / "erase.status.json").write_text(json.dumps({"rc": 124, "seconds": 30}))
    (tmp_path / "pytest_gpu.xml").write_text(JUNIT)
    done = run_script("bench/gpu_summary.py", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {row["figure"]: row for row in summary["targets"]}
    assert summary["device"] == "GPU 0: NVIDIA H200"
    assert rows["extract end-to-end / bare forward, 1,000 records"]["met"] is True      # 0.85 >= 0.8
    assert rows["extract bf16 / fp32 end-to-end, 1,000 records"]["met"] is False        # 0.5 < 1.0
    assert rows["probe batched / separate, fp32"]["value"] == 25.8                      # the last batch size's row
    assert rows["probe step / GEMM limit, fp32, 200k"]["met"] is True                   # 1.7 <= 2
    erase = rows["erase / read, bundled sample"]
    assert erase["value"] is None and erase["met"] is None and erase["status"] == {"rc": 124, "seconds": 30}
    assert summary["pytest_gpu"] == {"tests": 13, "failures": 1, "errors": 0, "skipped": 2, "passed": 10}


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a CUDA machine runs the benches instead")
def test_the_gpu_check_refuses_in_one_line_without_a_cuda_device(tmp_path):
    script = Path(__file__).resolve().parent.parent / "bench" / "gpu.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "GPU_BENCH_DIR": str(tmp_path / "out")})
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: no CUDA device") and "\n" not in done.stderr.strip()
