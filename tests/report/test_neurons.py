"""The report section of neuron-analysis runs: the k to reach 95% of the full probe by hand, the curve, k-sparse and
per-label tables, the two plots, and a results.json lacking the curves refused by name."""

from __future__ import annotations

import json

import pytest

from probing.errors import DataFormatError
from probing.report import write_report
from probing.report.neurons import (
    ablation_lines,
    curves,
    full_accuracy,
    k_to_reach,
    k_to_reach_table,
    retrained_lines,
    run_label,
    summary_line,
    with_run_labels,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KS = [1, 2, 4, 8]


def neurons_result(layer: int, random_init: bool = False, per_label: bool = False, majority: float = 0.30) -> dict:
    """A run over 8 neurons with the probe ranking: its retrained linear probe reaches .95 * 0.80 = .76 at k=4, random
    at 8; the MLP-1s reach .95 * .655 at k=2 (probe) and never (random); the majority label scores `majority`."""
    result = {
        "analysis": "neurons", "model": "minilm", "random_init": random_init, "task": "upos", "layer": layer,
        "representation": str(layer), "neurons": 8, "ks": KS,
        "probe": {"dev_accuracy": 0.82, "test_accuracy": 0.80},
        "majority": {"label": "NOUN", "test_accuracy": majority},
        "rankings": {"probe": [3, 1, 0, 2, 4, 5, 6, 7], "random": [7, 6, 5, 4, 3, 2, 1, 0]},
        "ablation": {"fill": "mean", "random": [0.80, 0.79, 0.70, 0.20],
                     "probe": {"top": [0.60, 0.50, 0.40, 0.20], "bottom": [0.80, 0.80, 0.78, 0.20]}},
        "retrained": {"probe": [0.40, 0.60, 0.77, 0.80], "random": [0.20, 0.30, 0.50, 0.79],
                      "best_epochs": {"probe": [1, 1, 2, 2], "random": [0, 1, 1, 2]}},
        "cross_check": {"probe": [0.50, 0.76, 0.80, 0.81], "random": [0.20, 0.30, 0.40, 0.50],
                        "best_epochs": {"probe": [1, 1, 1, 1], "random": [1, 1, 1, 1]}},
        "sparse": {"k": [1, 2], "candidates": 4,
                   "labels": {"NOUN": {"best_neuron": 3, "neurons": [[3], [3, 1]], "f1": [0.5, 0.625],
                                       "dev_f1": [0.5, 0.6]}}},
    }
    result["k_to_95"] = k_to_reach_table(result)
    if per_label:
        result["per_label"] = {"NOUN": {"probe": {"neurons": [3, 1], "scores": [2.0, 1.0]}}, "VERB": {}}
    return result


def test_the_k_to_reach_95_percent_of_the_full_probe():
    assert k_to_reach([0.1, 0.5, 0.9], [1, 2, 4], 0.5) == 2 and k_to_reach([0.1], [1], 0.5) is None
    table = neurons_result(3)["k_to_95"]
    # linear: .95 * 0.80 = .76; MLP-1: .95 * mean(.81, .50) = .62225
    assert table == {"retrained": {"probe": 4, "random": 8}, "cross_check": {"probe": 2, "random": None}}
    assert full_accuracy(neurons_result(3), "cross_check") == pytest.approx(0.655)
    flat = curves(neurons_result(3))
    assert list(flat) == ["ablation/top_probe", "ablation/bottom_probe", "ablation/random", "retrained/probe",
                          "retrained/random", "cross_check/probe", "cross_check/random"]
    assert summary_line(neurons_result(3)).endswith("probe 4 / 2, random 8 / -")  # as the report's table shows
    assert "(the majority label's 0.300)" in summary_line(neurons_result(3))


def test_the_section_tabulates_every_run_and_draws_the_curves(tmp_path):
    runs = (("pretrained", neurons_result(3, per_label=True)), ("control", neurons_result(0, True, majority=0.7)))
    for name, result in runs:
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(result))
    write_report(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "# Neuron-level analysis" in report and "2 runs from" in report
    assert "| minilm, upos, layer 3 | 8 | 0.300 | 0.800 | 0.655 | probe | 4 | 2 |" in report
    # .7 is under the linear target .76 and over the MLP-1's .62225: the MLP-1 k says nothing of the neurons there
    assert ("| minilm (random init), upos, layer 0 | 8 | 0.700 | 0.800 | 0.655 | random | 8 | - (majority reaches "
            "it) |") in report
    assert "| retrained/probe | 0.400 | 0.600 | 0.770 | 0.800 |" in report
    assert "| NOUN | 3 | 0.500 | 0.625 |" in report
    assert report.count("Top neurons of each label") == 1 and "| NOUN | 3 1 |" in report and "| VERB | - |" in report
    for figure in ("neurons_ablation.png", "neurons_retrained.png"):
        assert (tmp_path / figure).read_bytes().startswith(PNG_MAGIC)


def swept(result: dict, ranking: str, seed: int = 0) -> dict:
    """`result` as a job of a sweep over analysis.ranking (and the seed) records itself: its config, its ranking."""
    result = {**result, "config": {"seed": seed, "analysis": {"ranking": ranking}, "run_name": f"job-{ranking}"}}
    if ranking != "probe":
        result["rankings"] = {ranking: result["rankings"]["probe"], "random": result["rankings"]["random"]}
        for part in ("ablation", "retrained", "cross_check"):
            result[part] = {ranking if name == "probe" else name: value for name, value in result[part].items()}
    return result


def test_runs_of_one_model_task_and_layer_are_told_apart_and_each_ranking_keeps_its_colour(tmp_path):
    runs = [swept(neurons_result(3), "probeless"), swept(neurons_result(3), "probe"),
            swept(neurons_result(3), "probe", seed=1)]
    labelled = with_run_labels(runs)
    assert [result["apart"] for result in labelled] == [
        "analysis.ranking=probe, seed=0", "analysis.ranking=probe, seed=1", "analysis.ranking=probeless, seed=0"]
    assert run_label(labelled[2]) == "minilm, upos, layer 3 [analysis.ranking=probeless, seed=0]"
    assert with_run_labels([neurons_result(3)])[0]["apart"] == ""  # nothing to tell apart
    colours = {"probe": "tab:blue", "probeless": "tab:orange"}
    assert {colour for _, _, colour, _ in ablation_lines(labelled[2], colours)} == {"tab:orange", "0.3"}
    assert {colour for _, _, colour, _ in retrained_lines(labelled[0], colours)} == {"tab:blue", "0.3"}
    for name, result in zip("abc", runs):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(result))
    write_report(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert report.count("## minilm, upos, layer 3 [analysis.ranking=probe, seed=1]: curves") == 1
    assert "| minilm, upos, layer 3 [analysis.ranking=probeless, seed=0] | 8 |" in report


def test_a_run_without_its_curves_is_refused_by_name(tmp_path):
    result = neurons_result(3)
    del result["retrained"]
    (tmp_path / "results.json").write_text(json.dumps(result))
    with pytest.raises(DataFormatError, match="results.json.*`retrained`"):
        write_report(tmp_path)


@pytest.mark.parametrize("damage", [
    lambda result: result["probe"].update(test_accuracy="x"),
    lambda result: result["retrained"].update(probe=[0.4]),
    lambda result: result.update(majority=None),
    lambda result: result["sparse"].pop("labels"),
], ids=["score not a number", "curve cut short", "null", "nested key missing"])
def test_a_value_the_section_cannot_read_is_one_error_naming_the_file(tmp_path, damage):
    damaged = neurons_result(3)
    damage(damaged)
    for name, result in (("fine", neurons_result(0)), ("damaged", damaged)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(result))
    with pytest.raises(DataFormatError, match=r"damaged/results.json: a value that the report's section \"Neuron"):
        write_report(tmp_path)
