"""The report section of static PC runs: a row per model and layer with each benchmark's score and coverage, and the
plot of scores by layer."""

from __future__ import annotations

import json

from probing.report import write_report
from probing.report.plots import layer_axis, pyplot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def static_pc_result(layer: int, simlex: float | None, covered: int) -> dict:
    similarity = {"benchmark": "SimLex", "measure": "cosine", "correlation": "spearman", "score": simlex,
                  "pairs": 999, "covered": covered, "missing_words": 3, "missing_examples": []}
    analogy = {"benchmark": "google", "task": "analogy", "score": 0.25, "questions": 10, "covered": 4,
               "missing_words": 1, "missing_examples": []}
    return {"analysis": "static_pc", "model": "minilm", "layer": layer,
            "static_pc": {"layer": layer, "words": 100 + layer, "centered": False, "correlation": "spearman",
                          "similarity": [similarity], "analogy": [analogy], "categorization": []}}


def test_a_row_per_layer_with_coverage_and_the_plot(tmp_path):
    for layer, score in ((2, 0.1), (0, 0.3154), (1, None)):
        (tmp_path / str(layer)).mkdir()
        (tmp_path / str(layer) / "results.json").write_text(json.dumps(static_pc_result(layer, score, 963 - layer)))
    write_report(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "# PC static embeddings (Ethayarajh 2019, §4.3)\n\n3 runs" in report
    lines = [line for line in report.splitlines() if line.startswith("| minilm |")]
    assert lines == ["| minilm | 0 | 100 | 0.315 (963/999) | 0.250 (4/10) |",
                     "| minilm | 1 | 101 | - (962/999) | 0.250 (4/10) |",
                     "| minilm | 2 | 102 | 0.100 (961/999) | 0.250 (4/10) |"]
    assert (tmp_path / "static_pc_by_layer.png").read_bytes().startswith(PNG_MAGIC)


def test_a_layer_axis_marks_whole_layers_only():
    """Two layers (0 and 1) would get ticks at 0.2, 0.4, ... from matplotlib's default locator."""
    fig, ax = pyplot().subplots()
    ax.plot([0, 1], [0.5, 0.6])
    default_ticks = [tick for tick in ax.get_xticks() if 0 <= tick <= 1]
    layer_axis(ax)
    ticks = [tick for tick in ax.get_xticks() if 0 <= tick <= 1]
    pyplot().close(fig)
    assert any(tick != int(tick) for tick in default_ticks)
    assert ticks == [0, 1] and ax.get_xlabel() == "layer"
