"""The Fig. 6 section: setups told apart from results.json, seeds averaged, drops computed against the right model."""

from __future__ import annotations

import csv
import json

import pytest

from probing.report import write_report
from probing.report.finetuned_probing import comparisons, difference, score, setup_of


def run(layer, test, weights, task=None, reused_from=None, seed=0, representation=None):
    result = {"level": "context", "representation": representation or str(layer), "layer": layer, "seed": seed,
              "weights_sha256": weights, "finetuned_task": task, "dev": {"micro_f1": test - 0.1},
              "test": {"micro_f1": test}}
    if reused_from:
        result["reused_probes"] = {"weights_sha256": reused_from, "path": "x"}
    return result


def test_setups_follow_the_results_fields():
    assert setup_of(run(1, 0.5, "P")) == "pretrained"
    assert setup_of(run(1, 0.5, "F", task="pos", reused_from="P")) == "(a)"
    assert setup_of(run(1, 0.5, "F", task="pos")) == "(b)"
    assert setup_of(run(1, 0.5, "P", reused_from="P")) is None  # probes rescored on their own model
    assert setup_of(run("pbert", 0.5, "F", task="pos", representation="P-BERT")) is None


def test_drops_are_taken_against_the_model_the_probes_came_from_and_seeds_are_averaged():
    results = [
        run(1, 0.60, "P"), run(1, 0.70, "P", seed=1),            # pretrained P, layer 1: mean .65
        run(1, 0.10, "Q"),                                       # another pretrained model, must not be used
        run(1, 0.20, "F", task="pos", reused_from="P"), run(1, 0.30, "F", task="pos", reused_from="P", seed=1),
        run(1, 0.55, "F", task="pos"),
        run(2, 0.80, "P"), run(2, 0.40, "F", task="pos", reused_from="P"),
    ]
    [item] = comparisons(results)
    assert item["label"] == "pos"
    assert score(item, "pretrained", 1) == pytest.approx(0.65)
    assert difference(item, "(a)", 1) == pytest.approx(0.25 - 0.65)
    assert difference(item, "(b)", 1) == pytest.approx(0.55 - 0.65)
    assert difference(item, "(a)", 2) == pytest.approx(0.40 - 0.80) and difference(item, "(b)", 2) is None
    assert difference(item, "(a)", 1, split="dev") == pytest.approx((0.25 - 0.1) - (0.65 - 0.1))


def test_two_models_of_one_task_get_a_panel_each(tmp_path):
    results = [run(0, 0.5, "P"), run(0, 0.4, "F1", task="pos"), run(0, 0.3, "F2", task="pos"),
               run(0, 0.2, "S", task="sst2")]
    for index, result in enumerate(results):
        folder = tmp_path / "sweep" / str(index)
        folder.mkdir(parents=True)
        full = {**result, "model": "m", "data": "d", "probe": "p", "pooling": "mean", "context_size": None,
                "config": {"seed": 0, "index": index}}
        (folder / "results.json").write_text(json.dumps(full))
    write_report(tmp_path / "sweep")
    text = (tmp_path / "sweep" / "report.md").read_text()
    assert "Fine-tuned on pos (F1)" in text and "Fine-tuned on pos (F2)" in text and "Fine-tuned on sst2" in text
    assert (tmp_path / "sweep" / "finetuned_probing_by_layer.png").is_file()
    with open(tmp_path / "sweep" / "finetuned_probing.csv", newline="") as handle:
        rows = {row["finetuned"]: row for row in csv.DictReader(handle) if row["split"] == "test"}
    assert float(rows["sst2"]["(b) - pretrained"]) == pytest.approx(0.2 - 0.5)
