"""The report section of word-task probe runs: mean ± std over seeds by layer x probe family, MDL codelengths, the
scalar mix's center of gravity, word_probes.csv, the plots, and the s-class report left without these runs."""

from __future__ import annotations

import csv
import json
import statistics

import pytest

from probing.report import write_report
from probing.report.word_probes import (
    aggregate_word_runs,
    family_label,
    family_sort_key,
    is_word_probe_run,
    representation_sort_key,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def split(accuracy, control=None, f1=(0.9, 0.5)):
    scores = {"accuracy": accuracy, "macro_f1": accuracy - 0.1, "per_label_f1": dict(zip(("ADJ", "NOUN"), f1)),
              "n_examples": 1500}
    if control is not None:
        scores |= {"control_accuracy": control, "control_macro_f1": control - 0.1, "selectivity": accuracy - control}
    return scores


def word_result(layer, family, seed, test, control=None, mdl=None, rank=None, task="upos", lr=1e-3, **extra):
    """A results.json of probe.py on a word task; `mdl` = (codelength bits, control codelength bits)."""
    representation = str(layer) if isinstance(layer, int) else layer
    result = {"task": task, "probe_family": family, "rank": rank, "pair": False, "model": "minilm",
              "random_init": False, "data": task, "level": "context",
              "layer": layer if isinstance(layer, int) or layer == "mix" else None, "representation": representation,
              "probe": family, "seed": seed, "labels": ["ADJ", "NOUN"],
              "dev": split(test + 0.01, None if control is None else control + 0.01), "test": split(test, control),
              "config": {"seed": seed, "paths": {"output_dir": f"/runs/{task}-{family}-{rank}-{layer}-{seed}-{lr}"},
                         "task": {"name": task}, "layer": layer,
                         "probe": {"name": family, "family": family, "rank": rank, "optimizer": {"lr": lr}}},
              **extra}
    if mdl is not None:
        bits, control_bits = mdl
        result["mdl"] = {"codelength_bits": bits, "uniform_codelength_bits": 200_000.0,
                         "compression": 200_000.0 / bits, "control_codelength_bits": control_bits,
                         "control_compression": 200_000.0 / control_bits, "block_fractions": [0.5, 1.0],
                         "block_ends": [50, 100], "block_bits": [bits / 2]}
    return result


def sclass_result(layer, seed):
    return {"model": "minilm", "data": "streusle", "probe": "sclass_mlp", "pooling": "mean", "context_size": None,
            "level": "context", "random_init": False, "layer": layer, "representation": str(layer), "seed": seed,
            "dev": {"micro_f1": 0.5, "n_combinations": 10, "n_contexts": 30},
            "test": {"micro_f1": 0.4, "n_combinations": 12, "n_contexts": 40}}


def write(folder, results):
    for job, result in enumerate(results):
        (folder / str(job)).mkdir(parents=True)
        (folder / str(job) / "results.json").write_text(json.dumps(result))
    return folder


# (layer, family, seed) -> test accuracy, control accuracy, MDL (linear only: bits, control bits)
SCORES = {
    (0, "linear", 0): (0.80, 0.60, (60_000.0, 150_000.0)), (0, "linear", 1): (0.84, 0.62, (64_000.0, 152_000.0)),
    (3, "linear", 0): (0.90, 0.70, (50_000.0, 140_000.0)), (3, "linear", 1): (0.92, 0.66, (52_000.0, 146_000.0)),
    (0, "mlp1", 0): (0.85, 0.75, None), (0, "mlp1", 1): (0.87, 0.79, None),
    (3, "mlp1", 0): (0.95, 0.80, None), (3, "mlp1", 1): (0.97, 0.84, None),
}


@pytest.fixture
def sweep(tmp_path):
    runs = [word_result(layer, family, seed, test, control, mdl)
            for (layer, family, seed), (test, control, mdl) in SCORES.items()]
    runs += [word_result("P-BERT", "linear", 0, 0.70, 0.65),
             word_result("mix", "linear", 0, 0.93, 0.70, center_of_gravity=2.5, gamma=1.2,
                         mix_weights=[0.25, 0.25, 0.5]),
             word_result("mix", "linear", 1, 0.95, 0.72, center_of_gravity=3.1, gamma=1.0,
                         mix_weights=[0.15, 0.35, 0.5]),
             sclass_result(3, 0), sclass_result(3, 1)]
    return write(tmp_path, runs)


def csv_rows(folder):
    with open(folder / "word_probes.csv", newline="", encoding="utf-8") as handle:
        return {(row["family"], row["representation"]): row for row in csv.DictReader(handle)}


def table_lines(report, start):
    """The body of the first Markdown table from the line starting with `start` on."""
    lines = report.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    first = next(i for i in range(first, len(lines)) if lines[i].startswith("|---")) + 1
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def test_is_kind_and_family_labels():
    assert is_word_probe_run(word_result(3, "mlp1", 0, 0.9))
    assert not is_word_probe_run(sclass_result(3, 0))
    assert not is_word_probe_run({**word_result(3, "linear", 0, 0.9), "task": "sclass"})
    assert not is_word_probe_run({"task": "pos", "model": "minilm", "dev": {"accuracy": 0.9}})  # train.py
    assert family_label(word_result(3, "linear", 0, 0.9, rank=16)) == "linear r=16"
    labels = ["mlp2", "linear r=16", "mlp1", "linear", "linear r=4"]
    assert sorted(labels, key=family_sort_key) == ["linear", "linear r=4", "linear r=16", "mlp1", "mlp2"]


def test_seed_means_by_layer_and_family_in_csv(sweep):
    write_report(sweep)
    rows = csv_rows(sweep)
    assert list(rows) == [("linear", "P-BERT"), ("linear", "0"), ("linear", "3"), ("linear", "mix"),
                          ("mlp1", "0"), ("mlp1", "3")]
    linear3 = rows[("linear", "3")]
    assert linear3["seeds"] == "0 1"
    assert float(linear3["test_accuracy"]) == pytest.approx(0.91)
    assert float(linear3["test_accuracy_std"]) == pytest.approx(statistics.stdev([0.90, 0.92]))
    assert float(linear3["test_selectivity"]) == pytest.approx((0.20 + 0.26) / 2)
    assert float(linear3["dev_accuracy"]) == pytest.approx(0.92)
    assert float(linear3["mdl_codelength_kbits"]) == pytest.approx(51.0)
    assert float(linear3["mdl_control_codelength_kbits"]) == pytest.approx(143.0)
    assert float(linear3["mdl_compression"]) == pytest.approx((200 / 50 + 200 / 52) / 2)
    assert linear3["test_per_label_f1"] == "ADJ=0.9000 NOUN=0.5000"
    mlp0 = rows[("mlp1", "0")]
    assert float(mlp0["test_selectivity"]) == pytest.approx(0.09)
    assert mlp0["mdl_codelength_kbits"] == ""
    mix = rows[("linear", "mix")]
    assert float(mix["center_of_gravity"]) == pytest.approx(2.8)
    assert mix["mix_weights"] == "0.2000 0.3000 0.5000"
    assert rows[("linear", "P-BERT")]["test_accuracy_std"] == ""  # one seed: no spread


def test_markdown_tables_plots_and_sclass_section_apart(sweep):
    write_report(sweep)
    report = (sweep / "report.md").read_text()
    assert "# S-class probing report\n\n2 runs" in report  # the word runs are not s-class rows
    with open(sweep / "report.csv", newline="", encoding="utf-8") as handle:
        assert [row["representation"] for row in csv.DictReader(handle)] == ["3"]
    assert "# Word-task probing report\n\n11 runs" in report
    assert "## upos: minilm, data=upos" in report
    accuracy = table_lines(report, "| representation | linear acc.")
    assert accuracy[0] == "| P-BERT | 0.700 | 0.050 | - | - |"
    sd = statistics.stdev
    assert accuracy[2] == (f"| 3 | 0.910 ± {sd([0.90, 0.92]):.3f} | 0.230 ± {sd([0.20, 0.26]):.3f} "
                           f"| 0.960 ± {sd([0.95, 0.97]):.3f} | 0.140 ± {sd([0.15, 0.13]):.3f} |")
    assert accuracy[3].startswith("| mix | 0.940 ± ")
    assert len(accuracy) == 4
    header = report.splitlines()[report.splitlines().index(accuracy[0]) - 2]
    assert header == "| representation | linear acc. | linear sel. | mlp1 acc. | mlp1 sel. |"
    mdl = table_lines(report, "| representation | linear kbits")
    assert [line.split(" | ")[0] for line in mdl] == ["| 0", "| 3"]  # only the representations with MDL runs
    assert mdl[0] == (f"| 0 | 62.0 ± {sd([60.0, 64.0]):.1f} | {(200 / 60 + 200 / 64) / 2:.2f} ± "
                      f"{sd([200 / 60, 200 / 64]):.2f} | 151.0 ± {sd([150.0, 152.0]):.1f} | "
                      f"{(200 / 150 + 200 / 152) / 2:.2f} ± {sd([200 / 150, 200 / 152]):.2f} |")
    assert "mlp1 kbits" not in report  # no MDL for mlp1
    assert f"Scalar mix, linear: center of gravity 2.80 ± {sd([2.5, 3.1]):.2f}, γ = 1.10 ± " in report
    for name in ("word_probes_upos_by_layer.png", "word_probes_upos_mdl_by_layer.png"):
        assert (sweep / name).read_bytes().startswith(PNG_MAGIC)
        assert f"`{name}`" in report


def test_tasks_apart_variants_apart_and_no_mdl_plot_without_mdl(tmp_path):
    runs = [word_result(layer, "mlp2", seed, 0.8 + layer / 100, task="xpos") for layer in (1, 2) for seed in (0, 1)]
    runs += [word_result(2, "mlp2", 0, 0.5, task="xpos", lr=0.1)]
    runs += [word_result(1, "linear", 0, 0.6, rank=16), word_result(2, "linear", 0, 0.7, rank=16)]
    write_report(write(tmp_path, runs))
    report = (tmp_path / "report.md").read_text()
    assert "S-class" not in report
    assert "## upos: minilm, data=upos" in report
    # the lr sweep at layer 2 keeps layer 1 in the table of its own lr
    assert table_lines(report, "## xpos: minilm, data=xpos, probe.optimizer.lr=0.001") == [
        "| 1 | 0.810 ± 0.000 |", "| 2 | 0.820 ± 0.000 |"]
    assert table_lines(report, "## xpos: minilm, data=xpos, probe.optimizer.lr=0.1") == ["| 2 | 0.500 |"]
    assert "| representation | linear r=16 acc. |" in report
    assert "sel." not in report  # no control task ran
    rows = aggregate_word_runs(runs)
    xpos = [row for row in rows if row["variant"] == "probe.optimizer.lr=0.001"]
    assert [row["test_accuracy"] for row in xpos] == pytest.approx([0.81, 0.82])
    assert [row["seeds"] for row in xpos] == [[0, 1], [0, 1]]
    pngs = sorted(path.name for path in tmp_path.glob("*.png"))
    assert pngs == ["word_probes_upos_by_layer.png", "word_probes_xpos_by_layer.png"]


def test_runs_on_other_versions_of_a_data_file_are_never_averaged_nor_in_one_table(tmp_path):
    """Seed 0 and seed 1 of layer 3 read two versions of test.jsonl, a third seed recorded no data files: three tables
    (the one of the unrecorded run says so), each with its own mean."""
    def read(test_digest):
        return [["/data/upos/test.jsonl", test_digest], ["/data/upos/train.jsonl", "1" * 64]]

    runs = [word_result(3, "linear", 0, 0.90, data_files=read("a" * 64)),
            word_result(3, "linear", 1, 0.80, data_files=read("b" * 64)),
            word_result(3, "linear", 2, 0.70), word_result(3, "linear", 3, 0.72, data_files=read("a" * 64))]
    write_report(write(tmp_path, runs))
    report = (tmp_path / "report.md").read_text()
    assert table_lines(report, "## upos: minilm, data=upos, test.jsonl sha256 aaaaaaaa") == ["| 3 | 0.810 ± 0.127 |"]
    assert table_lines(report, "## upos: minilm, data=upos, test.jsonl sha256 bbbbbbbb") == ["| 3 | 0.800 |"]
    assert table_lines(report, "## upos: minilm, data=upos, data files not recorded") == ["| 3 | 0.700 |"]
    assert ("These runs did not record the data files they read; other runs of this setting read another version of "
            "their data files") in report
    assert "train.jsonl" not in report  # the file every version shares tells nothing apart


def test_baselines_first_and_mix_last():
    names = ["mix", "3", "P-BERT", "10", "0"]
    assert sorted(names, key=representation_sort_key) == ["P-BERT", "0", "3", "10", "mix"]
