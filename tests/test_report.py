"""The report aggregates results.json files of a sweep: per-layer rows, mean ± std over seeds, CSV, Markdown, plot."""

import csv
import json
import statistics

import pytest

from probing.report import aggregate, main, write_report


def write_result(folder, layer, seed, dev, test, model="minilm"):
    folder.mkdir(parents=True)
    result = {"model": model, "data": "streusle", "probe": "sclass_mlp", "pooling": "mean", "context_size": None,
              "layer": layer, "seed": seed,
              "dev": {"micro_f1": dev, "n_combinations": 10, "n_contexts": 30},
              "test": {"micro_f1": test, "n_combinations": 12, "n_contexts": 40}}
    (folder / "results.json").write_text(json.dumps(result))


@pytest.fixture
def sweep(tmp_path):
    scores = {(0, 1): (0.50, 0.40), (0, 2): (0.60, 0.50), (1, 1): (0.70, 0.65), (1, 2): (0.80, 0.75), (10, 1): (0.9, 0.85)}
    for job, ((layer, seed), (dev, test)) in enumerate(sorted(scores.items())):
        write_result(tmp_path / str(job), layer, seed, dev, test)
    return tmp_path


def test_rows_are_layers_in_numeric_order_with_seed_mean_and_std(sweep):
    rows = aggregate([json.loads(p.read_text()) for p in sweep.rglob("results.json")])
    assert [r["layer"] for r in rows] == [0, 1, 10]
    assert rows[0]["seeds"] == [1, 2]
    assert rows[0]["test_micro_f1"] == pytest.approx(0.45)
    assert rows[0]["test_micro_f1_std"] == pytest.approx(statistics.stdev([0.40, 0.50]))
    assert rows[1]["dev_micro_f1"] == pytest.approx(0.75)
    assert rows[2]["test_micro_f1_std"] is None  # a single seed has no spread


def test_report_files(sweep, capsys):
    rows = write_report(sweep)
    printed = capsys.readouterr().out
    assert "0.450 ± 0.071" in printed and "| 10 |" in printed
    with open(sweep / "report.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [r["layer"] for r in table] == ["0", "1", "10"]
    assert float(table[1]["test_micro_f1"]) == pytest.approx(0.70)
    assert (sweep / "report.md").read_text().count("\n| ") == len(rows) + 1
    png = (sweep / "micro_f1_by_layer.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_varying_settings_become_columns(tmp_path):
    write_result(tmp_path / "a", 3, 0, 0.5, 0.5, model="minilm")
    write_result(tmp_path / "b", 3, 0, 0.6, 0.6, model="bert")
    write_report(tmp_path)
    header = (tmp_path / "report.md").read_text().splitlines()[4]
    assert header.startswith("| model | layer |")


def test_cli_on_empty_folder_fails(tmp_path):
    with pytest.raises(SystemExit):
        main([str(tmp_path)])


def test_per_class_f1_by_layer_averages_seeds_and_keeps_undefined(tmp_path):
    from probing.report import per_class_by_layer

    def result(layer, seed, per_class):
        return {"model": "m", "data": "d", "probe": "p", "pooling": "mean", "context_size": None, "layer": layer,
                "seed": seed, "classes": ["a", "b"], "test": {"micro_f1": 0.5, "per_class_f1": per_class}}

    results = [result(0, 1, [0.2, None]), result(0, 2, [0.4, None]), result(1, 1, [1.0, 0.5]), result(1, 2, [0.0, None])]
    classes, layers, grid = per_class_by_layer(results)
    assert classes == ["a", "b"] and layers == [0, 1]
    assert grid[0] == pytest.approx([0.3, 0.5])
    assert grid[1][0] is None and grid[1][1] == pytest.approx(0.5)
    assert per_class_by_layer(results + [{**result(0, 1, [0.1, 0.1]), "model": "other"}]) is None
