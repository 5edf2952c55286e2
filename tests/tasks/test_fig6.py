"""experiment=zhao2020_fig6: the pretrained model and, per fine-tuned model, setups (a) and (b) in one multirun."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.helpers import run_script
from tests.helpers.runs import fake_finetuned_model, tiny_model


@pytest.fixture(scope="module")
def train_runs(tmp_path_factory, tiny_bert_path) -> list[Path]:
    """Two train.py-like run folders (POS and SST-2) holding tiny fine-tuned models."""
    root = tmp_path_factory.mktemp("train_runs")
    runs = []
    for seed, task in enumerate(("pos", "sst2"), start=1):
        (root / task / "model").mkdir(parents=True)
        fake_finetuned_model(tiny_bert_path, root / task / "model", task, seed=seed)
        runs.append(root / task)
    return runs


def test_fig6_sweep_runs_every_setup_and_reports_the_drops(tmp_path, tiny_bert_path, train_runs):
    sweep = tmp_path / "sweep"
    finetuned = "[" + ",".join(str(run) for run in train_runs) + "]"
    result = run_script("probe.py", "experiment=zhao2020_fig6", f"finetuned={finetuned}", *tiny_model(tiny_bert_path),
                        "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = [json.loads(path.read_text()) for path in sweep.glob("*/*/results.json")]  # <setup>/<overrides>/
    runs = {f"{Path(r['config']['paths']['output_dir']).parent.name}/layer={r['layer']}": r for r in results}
    assert len(runs) == len(results)
    setups = ("pretrained", "pos-a", "pos-b", "sst2-a", "sst2-b")
    assert sorted(runs) == sorted(f"{setup}/layer={layer}" for setup in setups for layer in range(3))
    for layer in range(3):
        pretrained = runs[f"pretrained/layer={layer}"]
        assert pretrained["finetuned_task"] is None and "probes_file" in pretrained
        for task, train_run in zip(("pos", "sst2"), train_runs):
            setup_a, setup_b = runs[f"{task}-a/layer={layer}"], runs[f"{task}-b/layer={layer}"]
            assert setup_a["reused_probes"]["path"] == pretrained["probes_file"]
            assert setup_a["epochs_trained"] == 0 and setup_b["epochs_trained"] == 2
            for run in (setup_a, setup_b):
                assert run["finetuned_task"] == task and run["model_name_or_path"] == str(train_run / "model")
                assert run["layer"] == layer
    # the report: one table per fine-tuned model, the differences computed from the runs' own scores
    report = (sweep / "report.md").read_text()
    assert "Probing fine-tuned encoders" in report and "Fine-tuned on pos" in report and "Fine-tuned on sst2" in report
    assert (sweep / "finetuned_probing_by_layer.png").is_file()
    with open(sweep / "finetuned_probing.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["split"] == "test"]
    assert len(rows) == 6
    for row in rows:
        pretrained = runs[f"pretrained/layer={row['layer']}"]["test"]["micro_f1"]
        setup_a = runs[f"{row['task']}-a/layer={row['layer']}"]["test"]["micro_f1"]
        assert float(row["pretrained"]) == pytest.approx(pretrained)
        assert float(row["(a) - pretrained"]) == pytest.approx(setup_a - pretrained)

    written = {path: path.stat().st_mtime_ns for path in sweep.glob("*/*/results.json")}
    relaunch = run_script("probe.py", "experiment=zhao2020_fig6", f"finetuned={finetuned}",
                          *tiny_model(tiny_bert_path), "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert relaunch.returncode == 0, relaunch.stderr[-2000:]
    assert {path: path.stat().st_mtime_ns for path in sweep.glob("*/*/results.json")} == written  # all skipped


def test_fig6_refuses_a_folder_without_a_fine_tuned_model(tmp_path, tiny_bert_path):
    result = run_script("probe.py", "experiment=zhao2020_fig6", f"finetuned=[{tmp_path}]", *tiny_model(tiny_bert_path),
                        cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert str(tmp_path) in result.stderr and "task.json" in result.stderr and "Traceback" not in result.stderr
