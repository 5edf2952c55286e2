"""The fine-tuning section of the report: runs averaged over seeds, Table 7 by attention window, its plot."""

from __future__ import annotations

import csv
import json

import pytest

from probing.report import write_report
from probing.report.finetuning import aggregate, is_finetuning

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def train_result(window, seed, accuracy, task="pos", lr=5e-5, policy=None):
    """A results.json of train.py; without `policy`, one written before the attention policies existed."""
    config = {"seed": seed, "paths": {"output_dir": f"/runs/{window}-{policy}-{seed}-{lr}"},
              "finetune": {"attention_window": window, "module": {"optimizer": {"lr": lr}}}}
    result = {"task": task, "model": "minilm", "attention_window": window, "isotropy_reg": 0.0,
              "precision": "bf16-mixed", "dev": {"accuracy": accuracy}, "epochs_trained": 3, "duration_s": 120.0,
              "config": config}
    if policy is not None:
        config["finetune"]["attention_policy"] = policy
        result["attention_policy"] = policy if window is not None else None
    return result


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


def test_runs_on_another_version_of_a_data_file_are_rows_of_their_own():
    runs = [train_result(None, seed, accuracy) for seed, accuracy in ((0, 0.90), (1, 0.94), (0, 0.80))]
    for run, digest in zip(runs, ("a", "a", "b")):
        run["data_files"] = [["/data/ewt/en_ewt-ud-dev.conllu", digest * 64]]
    rows = {row["variant"]: (row["seeds"], row["dev_accuracy"]) for row in aggregate(runs)}
    assert rows == {"en_ewt-ud-dev.conllu sha256 aaaaaaaa": ([0, 1], pytest.approx(0.92)),
                    "en_ewt-ud-dev.conllu sha256 bbbbbbbb": ([0], 0.80)}


def test_seeds_named_in_the_run_name_are_still_seeds():
    """train.py's run_name holds the seed (conf/train.yaml) and its results.json records the seed in the config only:
    two seeds of one setting are one row, not two variants."""
    runs = [train_result(None, seed, accuracy) for seed, accuracy in ((0, 0.90), (1, 0.94))]
    for run in runs:
        run["config"]["run_name"] = f"minilm-pos-seed{run['config']['seed']}"
    [row] = aggregate(runs)
    assert row["variant"] == "" and row["seeds"] == [0, 1] and row["dev_accuracy"] == pytest.approx(0.92)


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


def test_table_7_has_a_column_per_attention_policy_and_shares_the_run_without_a_window(tmp_path):
    """Runs of three policies (and old runs, which were blocked) and two runs without a window configured with
    different policies: one "all" row, the same setting whatever the policy said."""
    runs = [train_result(window, 0, accuracy, policy=policy) for window, policy, accuracy in (
        (0, "positional", 0.80), (2, "positional", 0.90), (2, "sink", 0.85), (None, "positional", 0.93))]
    runs += [train_result(None, 1, 0.95, policy="sink"), train_result(2, 0, 0.70)]
    write(tmp_path, runs)
    write_report(tmp_path)
    table = (tmp_path / "report.md").read_text().split("Table 7)")[1]
    assert ("| context size k | pos dev accuracy (minilm, blocked) | pos dev accuracy (minilm, positional) "
            "| pos dev accuracy (minilm, sink) | Zhao et al. Table 7 (BERT-base) |") in table
    assert "| 0 | - | 0.800 | - | 0.886 |" in table and "| 2 | 0.700 | 0.900 | 0.850 | 0.973 |" in table
    assert "| all | 0.940 ± 0.014 | 0.940 ± 0.014 | 0.940 ± 0.014 | 0.977 |" in table
    with open(tmp_path / "finetuning.csv") as handle:
        rows = [(row["attention_window"], row["attention_policy"], row["seeds"]) for row in csv.DictReader(handle)]
    assert rows == [("0", "positional", "0"), ("2", "blocked", "0"), ("2", "positional", "0"), ("2", "sink", "0"),
                    ("", "", "0 1")]


def test_one_window_draws_no_window_plot(tmp_path):
    write(tmp_path, [train_result(None, 0, 0.9, task="sst2")])
    write_report(tmp_path)
    assert not (tmp_path / "accuracy_by_attention_window.png").exists()
    assert "| sst2 | minilm | all |" in (tmp_path / "report.md").read_text()
