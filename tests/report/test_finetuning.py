"""The fine-tuning section of the report: runs averaged over seeds, Table 7 by attention window, its plot."""

from __future__ import annotations

import csv
import json

import pytest

from probing.report import write_report
from probing.report.finetuning import aggregate, is_finetuning

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def train_result(window, seed, accuracy, task="pos", lr=5e-5):
    config = {"seed": seed, "paths": {"output_dir": f"/runs/{window}-{seed}-{lr}"},
              "finetune": {"attention_window": window, "module": {"optimizer": {"lr": lr}}}}
    return {"task": task, "model": "minilm", "attention_window": window, "isotropy_reg": 0.0,
            "precision": "bf16-mixed", "dev": {"accuracy": accuracy}, "epochs_trained": 3, "duration_s": 120.0,
            "config": config}


def write(folder, results):
    for job, result in enumerate(results):
        (folder / str(job)).mkdir(parents=True)
        (folder / str(job) / "results.json").write_text(json.dumps(result))


def test_seeds_are_averaged_and_other_values_are_rows_of_their_own():
    runs = [train_result(None, 0, 0.90), train_result(None, 1, 0.94), train_result(None, 0, 0.80, lr=1e-3)]
    rows = {row["variant"]: row for row in aggregate(runs)}
    assert {variant: row["seeds"] for variant, row in rows.items()} == {
        "finetune.module.optimizer.lr=5e-05": [0, 1], "finetune.module.optimizer.lr=0.001": [0]}
    seeds = rows["finetune.module.optimizer.lr=5e-05"]
    assert seeds["dev_accuracy"] == pytest.approx(0.92) and seeds["dev_accuracy_std"] == pytest.approx(0.02828, 1e-3)
    assert seeds["zhao2020_bert_base"] == 0.977 and is_finetuning(runs[0])


def test_an_attention_window_sweep_gets_table_7_and_its_plot(tmp_path, capsys):
    write(tmp_path, [train_result(window, 0, accuracy) for window, accuracy in ((0, 0.80), (2, 0.88), (None, 0.91))])
    assert write_report(tmp_path) == []  # no probe rows
    report = (tmp_path / "report.md").read_text()
    assert "# Fine-tuning report" in report and "## By attention window (Zhao et al. 2020, Table 7)" in report
    table = report.split("Table 7)")[1]
    assert "| 0 | 0.800 | 0.886 |" in table and "| 2 | 0.880 | 0.973 |" in table and "| all | 0.910 | 0.977 |" in table
    assert table.index("| 0 |") < table.index("| 2 |") < table.index("| all |")
    assert (tmp_path / "accuracy_by_attention_window.png").read_bytes()[:8] == PNG_MAGIC
    with open(tmp_path / "finetuning.csv") as handle:
        assert [row["attention_window"] for row in csv.DictReader(handle)] == ["0", "2", ""]
    assert "Fine-tuning report" in capsys.readouterr().out


def test_one_window_draws_no_window_plot(tmp_path):
    write(tmp_path, [train_result(None, 0, 0.9, task="sst2")])
    write_report(tmp_path)
    assert not (tmp_path / "accuracy_by_attention_window.png").exists()
    assert "| sst2 | minilm | all |" in (tmp_path / "report.md").read_text()
