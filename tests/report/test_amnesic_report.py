"""The report section of amnesic-probing runs: a row per run and score with no erasure, the concept erased, the random
controls' mean ± std and the changes, the bar plot, and a results.json lacking the scores refused by name."""

from __future__ import annotations

import json

import pytest

from probing.errors import DataFormatError
from probing.report import write_report
from probing.report.amnesic import scores_text

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def amnesic_result(objective: str, scores: dict, eraser: dict, headline: str = "accuracy") -> dict:
    return {"analysis": "amnesic", "model": "minilm", "objective": objective, "layer": 3, "concept": "upos",
            "data": "pos dev", "headline": headline, "eraser": eraser, "scores": scores}


def random_block(per_seed: list[dict]) -> dict:
    metrics = [key for key in per_seed[0] if key != "seed"]
    mean = {metric: sum(row[metric] for row in per_seed) / len(per_seed) for metric in metrics}
    return {"per_seed": per_seed, "mean": mean,
            "std": {metric: 0.01 if len(per_seed) > 1 else None for metric in metrics}}


@pytest.fixture
def runs(tmp_path):
    tagger = amnesic_result("pos", {"none": {"accuracy": 0.91}, "erased": {"accuracy": 0.36},
                                    "random": random_block([{"seed": 0, "accuracy": 0.90},
                                                            {"seed": 1, "accuracy": 0.92}])},
                            {"method": "leace", "rank": 16, "iterations": None})
    masked = amnesic_result("masked_lm", {"none": {"accuracy": 0.5, "kl": 0.0}, "erased": {"accuracy": 0.2, "kl": 1.5},
                                          "random": random_block([{"seed": 0, "accuracy": 0.45, "kl": 0.25}])},
                            {"method": "inlp", "rank": 30, "iterations": 16})
    for name, result in (("tagger", tagger), ("mlm", masked)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(result))
    return tmp_path


def test_a_row_per_run_and_score_and_the_bar_plot(runs):
    write_report(runs)
    report = (runs / "report.md").read_text()
    assert "# Amnesic probing (Elazar et al. 2021)\n\n2 runs" in report
    rows = [line for line in report.splitlines() if line.startswith("| minilm |")]
    assert rows == [
        "| minilm | masked_lm, pos dev | 3 | upos | inlp, rank 30, 16 iterations | accuracy | 0.500 | 0.200 | "
        "0.450 (1 seed) | -0.300 | -0.050 |",
        "| minilm | masked_lm, pos dev | 3 | upos | inlp, rank 30, 16 iterations | kl | 0.000 | 1.500 | "
        "0.250 (1 seed) | +1.500 | +0.250 |",
        "| minilm | pos, pos dev | 3 | upos | leace, rank 16 | accuracy | 0.910 | 0.360 | 0.910 ± 0.010 (2 seeds) | "
        "-0.550 | +0.000 |"]
    assert (runs / "amnesic.png").read_bytes().startswith(PNG_MAGIC)


def test_the_log_line_of_a_run(runs):
    result = json.loads((runs / "tagger" / "results.json").read_text())
    assert scores_text(result) == "accuracy: none 0.910, erased 0.360, random 0.910 ± 0.010 (2 seeds)"


def test_a_result_without_its_scores_is_refused_by_name(runs):
    result = json.loads((runs / "tagger" / "results.json").read_text())
    del result["scores"]
    (runs / "tagger" / "results.json").write_text(json.dumps(result))
    with pytest.raises(DataFormatError, match=r"tagger/results.json.*it has no `scores`, which the report's section "
                                              r"\"Amnesic probing \(Elazar et al. 2021\)\" reads"):
        write_report(runs)
