"""The report's generalisation section of statement probes (probe.eval_on), from hand-made results.json files: the
train x test accuracy matrix per layer (table, CSV, heatmap) against the matrix written here by hand, the curves and
the principal-component plots."""

from __future__ import annotations

import csv
import json
from importlib import resources

from probing.report import write_report
from tests.report.test_word_probes import PNG_MAGIC, split, word_result, write

# (layer, trained on, seed) -> {tested on: test accuracy}; the first entry is the run's own test split
RUNS = {
    (0, "cities", 0): {"cities": 0.50, "neg_cities": 0.52, "larger_than": 0.48},
    (0, "neg_cities", 0): {"neg_cities": 0.51, "cities": 0.49},
    (5, "cities", 0): {"cities": 0.90, "neg_cities": 0.60, "larger_than": 0.55},
    (5, "cities", 1): {"cities": 0.80, "neg_cities": 0.70, "larger_than": 0.65},
    (5, "neg_cities", 0): {"neg_cities": 0.85, "cities": 0.75},
}
# what the report must show: each cell the mean over seeds, by hand
EXPECTED = {
    0: {"cities": {"cities": 0.50, "neg_cities": 0.52, "larger_than": 0.48},
        "neg_cities": {"cities": 0.49, "neg_cities": 0.51}},
    5: {"cities": {"cities": 0.85, "neg_cities": 0.65, "larger_than": 0.60},
        "neg_cities": {"cities": 0.75, "neg_cities": 0.85}},
}


PLACEHOLDERS = {"string": "", "integer": 0, "number": 0.0, "boolean": False, "array": [], "object": {}, "null": None}


def complete(result: dict) -> dict:
    """`result` with every key its kind's schema requires and it lacks set to a placeholder of the declared type."""
    schema = json.loads((resources.files("probing") / "results" / "schemas" / "statement_probe.json").read_text())
    for key in schema["required"]:
        if key not in result:
            declared = schema["properties"][key]
            kind = declared.get("type") or declared["anyOf"][-1]["type"]
            result[key] = declared["const"] if "const" in declared else PLACEHOLDERS[kind]
    return result


def statement_result(layer, data, seed, scores, components=None):
    own, *_ = scores
    result = word_result(layer, "linear", seed, scores[own], task="truth", kind="statement_probe", pooling="last",
                         labels=["0", "1"], principal_components=components,
                         eval_on={name: {**split(accuracy), "n_examples": 60} for name, accuracy in scores.items()
                                  if name != own})
    result |= {"data": data, "control_task": None, "data_split": {"seed": 0, "dev_fraction": 0.2,
                                                                    "test_fraction": 0.2}}
    result["config"] |= {"data": {"name": data}}
    result["config"]["paths"]["output_dir"] += f"-{data}"
    return complete(result)


def test_the_matrix_per_layer_is_the_mean_over_seeds_of_each_train_test_pair(tmp_path):
    components = {"points": [[1.0, 0.5], [-1.0, -0.5], [0.2, 0.1]], "labels": [1, 0, 1],
                  "explained_variance_ratio": [0.7, 0.2], "splits": ["train", "dev", "test"]}
    runs = [statement_result(layer, data, seed, scores, components if data == "cities" else None)
            for (layer, data, seed), scores in RUNS.items()]
    folder = write(tmp_path / "sweep", runs)
    write_report(folder)
    with (folder / "statement_generalisation.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    found = {}
    for row in rows:
        found.setdefault(int(row["layer"]), {}).setdefault(row["trained_on"], {})[row["tested_on"]] = float(
            row["accuracy"])
    assert found.keys() == EXPECTED.keys()
    for layer, matrix in EXPECTED.items():
        assert found[layer].keys() == matrix.keys()
        for train, row in matrix.items():
            assert found[layer][train].keys() == row.keys()
            for test, value in row.items():
                assert abs(found[layer][train][test] - value) < 1e-9
    report = (folder / "report.md").read_text(encoding="utf-8")
    assert "| trained on \\ tested on | cities | neg_cities | larger_than |" in report
    assert "| **cities** | 0.850 | 0.650 | 0.600 |" in report and "| **neg_cities** | 0.750 | 0.850 | – |" in report
    for name in ("statement_generalisation_truth_minilm_last_linear.png",
                 "statement_accuracy_by_layer_truth_minilm_last_linear.png",
                 "statement_pca_truth_minilm_last_cities.png"):
        assert (folder / name).read_bytes().startswith(PNG_MAGIC), name
        assert f"`{name}`" in report
    assert not list(folder.glob("statement_pca_*neg_cities*"))  # its runs recorded no components


def test_no_matrix_without_runs_scored_on_other_datasets(tmp_path):
    runs = [statement_result(layer, "cities", 0, {"cities": 0.6}) for layer in (0, 1)]
    folder = write(tmp_path / "sweep", runs)
    write_report(folder)
    assert not (folder / "statement_generalisation.csv").exists()
    assert "Generalisation" not in (folder / "report.md").read_text(encoding="utf-8")
