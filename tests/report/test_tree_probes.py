"""The report section of the structural probes (task=tree_distance, tree_depth): mean ± std over seeds by
representation and rank under the LINEAR baseline's row, tree_probes.csv, the rank, layer and example pictures, and
the word-task and s-class sections left without these runs (and these runs without theirs)."""

from __future__ import annotations

import csv
import json
import statistics

import pytest

from probing.errors import DataFormatError
from probing.report import write_report
from probing.report.tree_pictures import word_centres
from probing.report.tree_probes import aggregate_tree_runs, best_run, is_tree_probe_run
from probing.report.word_probes import is_word_probe_run
from probing.results import migrated
from tests.report.test_word_probes import table_lines, write

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SCORES = {"distance": ("uuas", "dspr"), "depth": ("root_acc", "nspr")}
LINEAR = {"distance": {"uuas": 0.50, "dspr": 0.55}, "depth": {"root_acc": 0.40, "nspr": 0.45}}


def split(kind, scores, control=None):
    """A split's scores: `scores` and `control` are (headline, Spearman)."""
    result = dict(zip(SCORES[kind], scores)) | {"sentences": 40}
    if kind == "distance":
        result["uuas_edges"] = 400
    if control is not None:
        result |= {f"control_{key}": value for key, value in zip(SCORES[kind], control)}
        result |= {f"selectivity_{key}": score - value for key, score, value in zip(SCORES[kind], scores, control)}
    return result


def distance_example():
    return {"words": ["The", "cat", "sat", "on", "the", "mat", "."],
            "punctuation": [False] * 6 + [True],
            "gold_edges": [[0, 1], [1, 2], [2, 3], [3, 5], [4, 5]],
            "predicted_edges": [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]}


def depth_example():
    return {"words": ["The", "cat", "sat", "on", "the", "mat", "."],
            "punctuation": [False] * 6 + [True],
            "gold_depths": [2, 1, 0, 2, 2, 1, 1], "predicted_depths": [1.8, 1.2, 0.3, 2.4, 1.9, 1.1, 0.9]}


def tree_result(layer, seed, test, rank=384, control=None, kind="distance", dev=None, linear_shift=0.0, **extra):
    """A results.json of probe.py on a tree task as written before the schema (the structure as its `kind`: the report
    migrates it); `test` (and `control`): (headline score, Spearman)."""
    task = f"tree_{kind}"
    representation = str(layer)
    linear = {name: value + linear_shift for name, value in LINEAR[kind].items()}
    dev = dev if dev is not None else tuple(score + 0.01 for score in test)
    return {"task": task, "kind": kind, "probe": "linear", "probe_family": "linear", "rank": rank, "model": "minilm",
            "random_init": False, "data": "trees", "level": "context",
            "layer": layer if isinstance(layer, int) or layer == "mix" else None, "representation": representation,
            "seed": seed, "dev": split(kind, dev, control), "test": split(kind, test, control),
            "linear_baseline": {"dev": {**linear, "sentences": 40}, "test": {**linear, "sentences": 40}},
            "examples": [distance_example() if kind == "distance" else depth_example()],
            "best_epoch": 3, "epochs_trained": 8, "duration_s": 12.0,
            "config": {"seed": seed, "paths": {"output_dir": f"/runs/{task}-{layer}-{rank}-{seed}"},
                       "task": {"name": task}, "layer": layer,
                       "probe": {"name": "linear", "family": "linear", "rank": rank}},
            **extra}


def word_result(layer, seed):
    return {"task": "upos", "probe_family": "linear", "rank": None, "model": "minilm", "random_init": False,
            "data": "upos", "level": "context", "layer": layer, "representation": str(layer), "probe": "linear",
            "seed": seed, "labels": ["ADJ", "NOUN"], "dev": {"accuracy": 0.9}, "test": {"accuracy": 0.8},
            "config": {"seed": seed, "task": {"name": "upos"}, "layer": layer}}


def sclass_result(layer, seed):
    return {"task": "sclass", "probe_family": "mlp1", "model": "minilm", "data": "streusle", "probe": "sclass_mlp",
            "pooling": "mean", "context_size": None, "level": "context", "random_init": False, "layer": layer,
            "representation": str(layer), "seed": seed, "classes": ["a", "b"],
            "dev": {"micro_f1": 0.5, "n_combinations": 10, "n_contexts": 30},
            "test": {"micro_f1": 0.4, "n_combinations": 12, "n_contexts": 40}}


# (layer, seed) -> test (UUAS, DSpr.), control (UUAS, DSpr.) of the full-rank distance probe
LAYER_SWEEP = {(1, 0): ((0.60, 0.70), (0.30, 0.40)), (1, 1): ((0.64, 0.74), (0.36, 0.42)),
               (2, 0): ((0.80, 0.82), (0.40, 0.50)), (2, 1): ((0.84, 0.86), (0.42, 0.52))}
# rank -> test (UUAS, DSpr.) of layer 2, seed 0, without the control task
RANK_SWEEP = {4: (0.55, 0.60), 16: (0.70, 0.75)}


def sweep_runs():
    runs = [tree_result(layer, seed, test, control=control)
            for (layer, seed), (test, control) in LAYER_SWEEP.items()]
    runs[1]["linear_baseline"]["test"]["uuas"] += 1e-9  # a copy summed in another order: nothing is refused
    runs += [tree_result(2, 0, test, rank=rank) for rank, test in RANK_SWEEP.items()]
    runs += [tree_result("P-BERT", 0, (0.45, 0.50), control=(0.40, 0.45)),
             tree_result(2, 0, (0.90, 0.85), kind="depth")]
    return runs


@pytest.fixture(scope="module")
def report_folder(tmp_path_factory):
    """One report over a folder mixing the tree sweep with word-task and s-class runs (written once: plots are slow)."""
    folder = tmp_path_factory.mktemp("sweep")
    write(folder, [*sweep_runs(), word_result(3, 0), word_result(3, 1), sclass_result(3, 0), sclass_result(3, 1)])
    write_report(folder)
    return folder



def test_tree_runs_are_told_from_word_and_sclass_runs():
    tree, depth = tree_result(2, 0, (0.8, 0.8)), tree_result(2, 0, (0.8, 0.8), kind="depth")
    assert is_tree_probe_run(tree) and is_tree_probe_run(depth)
    assert not is_word_probe_run(tree) and not is_word_probe_run(depth)
    assert is_word_probe_run(word_result(3, 0)) and not is_tree_probe_run(word_result(3, 0))
    assert not is_tree_probe_run(sclass_result(3, 0)) and not is_word_probe_run(sclass_result(3, 0))


def test_seed_means_by_representation_and_rank():
    rows = aggregate_tree_runs([migrated(run) for run in sweep_runs()])
    distance = [row for row in rows if row["task"] == "tree_distance"]
    assert [(row["representation"], row["rank"]) for row in distance] == [
        ("P-BERT", 384), ("1", 384), ("2", 4), ("2", 16), ("2", 384)]
    layer2 = distance[-1]
    assert layer2["seeds"] == [0, 1]
    assert layer2["test_uuas"] == pytest.approx(0.82)
    assert layer2["test_uuas_std"] == pytest.approx(statistics.stdev([0.80, 0.84]))
    assert layer2["test_selectivity_dspr"] == pytest.approx(((0.82 - 0.50) + (0.86 - 0.52)) / 2)
    assert layer2["dev_dspr"] == pytest.approx(0.85)
    assert layer2["linear_test_uuas"] == pytest.approx(0.50)
    assert distance[2]["test_uuas_std"] is None  # one seed: no spread
    (depth,) = [row for row in rows if row["task"] == "tree_depth"]
    assert depth["test_root_acc"] == pytest.approx(0.90) and depth["test_uuas"] is None


def test_tables_with_the_linear_row(report_folder):
    report = (report_folder / "report.md").read_text()
    assert "# Structural probing report\n\n8 runs" in report
    assert "## tree_distance: minilm, data=trees" in report
    sd = statistics.stdev
    distance = table_lines(report, "## tree_distance")
    header = report.splitlines()[report.splitlines().index(distance[0]) - 2]
    assert header == "| representation | rank | UUAS | DSpr. | UUAS sel. | DSpr. sel. |"
    assert distance[0] == "| LINEAR (baseline) | - | 50.0 | 0.550 | - | - |"
    assert distance[1] == "| P-BERT | 384 | 45.0 | 0.500 | 5.0 | 0.050 |"
    assert distance[2] == (f"| 1 | 384 | 62.0 ± {sd([60, 64]):.1f} | 0.720 ± {sd([0.70, 0.74]):.3f} "
                           f"| 29.0 ± {sd([30, 28]):.1f} | 0.310 ± {sd([0.30, 0.32]):.3f} |")
    assert distance[3] == "| 2 | 4 | 55.0 | 0.600 | - | - |"
    assert distance[4] == "| 2 | 16 | 70.0 | 0.750 | - | - |"
    assert distance[5].startswith("| 2 | 384 | 82.0 ± ")
    assert len(distance) == 6
    depth = table_lines(report, "## tree_depth")
    header = report.splitlines()[report.splitlines().index(depth[0]) - 2]
    assert header == "| representation | rank | Root % | NSpr. |"
    assert depth == ["| LINEAR (baseline) | - | 40.0 | 0.450 |", "| 2 | 384 | 90.0 | 0.850 |"]


def test_csv_holds_dev_and_linear(report_folder):
    with open(report_folder / "tree_probes.csv", newline="", encoding="utf-8") as handle:
        rows = {(row["task"], row["representation"], row["rank"]): row for row in csv.DictReader(handle)}
    layer1 = rows[("tree_distance", "1", "384")]
    assert layer1["seeds"] == "0 1"
    assert float(layer1["dev_uuas"]) == pytest.approx(0.63)
    assert float(layer1["test_control_uuas"]) == pytest.approx(0.33)
    assert float(layer1["linear_dev_dspr"]) == pytest.approx(0.55)
    assert layer1["test_sentences"] == "40" and layer1["test_uuas_edges"] == "400"
    assert float(rows[("tree_depth", "2", "384")]["dev_nspr"]) == pytest.approx(0.86)


def test_files_and_the_other_sections(report_folder):
    report = (report_folder / "report.md").read_text()
    assert "# S-class probing report\n\n2 runs" in report  # tree and word runs are not s-class rows
    assert "# Word-task probing report\n\n2 runs" in report
    assert report.index("# Structural probing report") < report.index("# Word-task probing report")
    with open(report_folder / "word_probes.csv", newline="", encoding="utf-8") as handle:
        assert {row["task"] for row in csv.DictReader(handle)} == {"upos"}
    pngs = sorted(path.name for path in report_folder.glob("tree_probes_*.png"))
    assert pngs == ["tree_probes_tree_depth_examples.png", "tree_probes_tree_distance_by_layer.png",
                    "tree_probes_tree_distance_by_rank.png", "tree_probes_tree_distance_examples.png"]
    for name in pngs:
        assert (report_folder / name).read_bytes().startswith(PNG_MAGIC)
        assert f"`{name}`" in report


def test_examples_of_the_best_dev_run():
    runs = [migrated(run) for run in (tree_result(1, 0, (0.6, 0.7), dev=(0.70, 0.5)),
                                      tree_result(2, 0, (0.5, 0.7), dev=(0.75, 0.4)),
                                      tree_result(3, 0, (0.9, 0.9), dev=(0.90, 0.9), examples=[]))]
    assert best_run(runs)["representation"] == "2"  # the best dev UUAS among the runs that recorded examples
    assert best_run(runs[2:]) is None
    assert word_centres(["a", "bcd"]) == ([1.5, 5.5], 8.0)


def test_a_tree_run_lacking_what_the_section_reads_is_refused(tmp_path):
    broken = tree_result(2, 0, (0.8, 0.8))
    del broken["linear_baseline"], broken["examples"]
    write(tmp_path, [tree_result(1, 0, (0.8, 0.8)), broken])
    with pytest.raises(DataFormatError) as refusal:
        write_report(tmp_path)
    message = str(refusal.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "1" / "results.json"))
    assert ("it has no `linear_baseline`, `examples`, which the report's section \"Structural probing report\" reads"
            in message)
    assert not (tmp_path / "report.md").exists()


def test_undefined_scores_are_shown_as_undefined_with_the_reason(tmp_path):
    """A null score (undefined on the test sentences), and the bare NaN of a results.json written before they were
    null: '-' in the table, a line saying why, no traceback."""
    undefined = tree_result(1, 0, (None, None), dev=(0.5, 0.5))
    undefined["linear_baseline"]["test"] |= {"uuas": None, "dspr": None}
    write(tmp_path, [undefined])
    older = tree_result(2, 0, (0.7, 0.123456), dev=(0.5, 0.5))
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "results.json").write_text(json.dumps(older).replace("0.123456", "NaN"))
    write_report(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert table_lines(report, "## tree_distance") == ["| LINEAR (baseline) | - | - | - |", "| 1 | 384 | - | - |",
                                                       "| 2 | 384 | 70.0 | - |"]
    assert ("UUAS '-': undefined on these test sentences (no sentence has two words that are not punctuation: no gold "
            "edge to find).") in report
    assert ("DSpr. '-': undefined on these test sentences (no sentence of 5 to 50 words (the lengths it averages "
            "over) has a defined correlation).") in report


def data_files(test_digest):
    """results.json's `data_files` of a run that read the train file and a version of the test file."""
    return [["/data/bank/x-train.conllu", "1" * 64], ["/data/bank/x-test.conllu", test_digest]]


def test_runs_scored_on_another_version_of_the_test_file_get_a_table_each(tmp_path):
    """A sweep relaunched (a layer added) after its test file was edited: the runs of each version in a table of their
    own under their own LINEAR row, never averaged with the other version's runs of the same configuration."""
    first = [tree_result(layer, 0, (0.60 + layer / 100, 0.7), data_files=data_files("a" * 64)) for layer in (1, 2)]
    relaunch = [tree_result(layer, 0, (0.50 + layer / 100, 0.6), linear_shift=-0.1, data_files=data_files("b" * 64))
                for layer in (1, 2, 3)]
    older = tree_result(1, 0, (0.9, 0.9), kind="depth")  # no data_files: grouped as before
    write(tmp_path, [*first, *relaunch, older, tree_result(2, 0, (0.8, 0.8), kind="depth")])
    write_report(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "# Structural probing report\n\n7 runs" in report
    old, new = "## tree_distance: minilm, data=trees, x-test.conllu sha256 aaaaaaaa", "sha256 bbbbbbbb"
    assert table_lines(report, old) == ["| LINEAR (baseline) | - | 50.0 | 0.550 |", "| 1 | 384 | 61.0 | 0.700 |",
                                        "| 2 | 384 | 62.0 | 0.700 |"]
    assert table_lines(report, f"## tree_distance: minilm, data=trees, x-test.conllu {new}") == [
        "| LINEAR (baseline) | - | 40.0 | 0.450 |", "| 1 | 384 | 51.0 | 0.600 |", "| 2 | 384 | 52.0 | 0.600 |",
        "| 3 | 384 | 53.0 | 0.600 |"]
    assert ("These runs read x-test.conllu sha256 aaaaaaaa; other runs of this setting read another version of their "
            "data files (the SHA-256 of each file in results.json's `data_files`), so they do not score the same "
            "sentences: a table each, with its own LINEAR row.") in report
    assert "## tree_depth: minilm, data=trees\n" in report and "sha256 1111" not in report
    with open(tmp_path / "tree_probes.csv", newline="", encoding="utf-8") as handle:
        versions = [(row["representation"], row["data_version"]) for row in csv.DictReader(handle)
                    if row["task"] == "tree_distance"]
    assert versions == [("1", "x-test.conllu sha256 aaaaaaaa"), ("2", "x-test.conllu sha256 aaaaaaaa"),
                        ("1", f"x-test.conllu {new}"), ("2", f"x-test.conllu {new}"), ("3", f"x-test.conllu {new}")]
