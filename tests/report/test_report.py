"""The report aggregates results.json files of a sweep: one row per setting, mean ± std over seeds, selectivity,
the representation order of Zhao et al. (2020), paper-shaped Markdown tables, CSV and the plots that apply."""

from __future__ import annotations

import csv
import json
import random
import statistics
import warnings

import pytest

from probing.errors import DataFormatError
from probing.report import write_report, written_section
from probing.report.__main__ import main
from probing.report.aggregate import aggregate, representation_sort_key
from probing.report.plots import drawn_layer_ticks, per_class_by_layer, plot_per_class, write_plots
from probing.report.runs import distinct_runs, variant_keys
from probing.report.tables import context_size_tables, markdown_table, representation_tables

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def old_result(layer, seed, dev, test, model="minilm"):
    """A results.json as written before representations, levels and controls existed; `dev`/`test` are the
    micro-F1 or the whole split dict."""
    def split(scores, n_combinations, n_contexts):
        return scores if isinstance(scores, dict) else {
            "micro_f1": scores, "n_combinations": n_combinations, "n_contexts": n_contexts}

    return {"model": model, "data": "streusle", "probe": "sclass_mlp", "pooling": "mean", "context_size": None,
            "layer": layer, "seed": seed, "dev": split(dev, 10, 30), "test": split(test, 12, 40)}


def result(representation, seed=0, dev=0.5, test=0.5, **overrides):
    """A results.json of the current schema; `overrides` replace top-level keys."""
    layer = int(representation) if representation.isdigit() else None
    return {**old_result(layer, seed, dev, test), "representation": representation, "level": "context",
            "random_init": False, **overrides}


def write_results(folder, results):
    for job, record in enumerate(results):
        (folder / str(job)).mkdir(parents=True)
        (folder / str(job) / "results.json").write_text(json.dumps(record))
    return folder


def plots_written(tmp_path, results):
    """write_plots's answer, checked against the PNG files that really appeared."""
    names = write_plots(aggregate(results), results, tmp_path)
    on_disk = sorted(p.name for p in tmp_path.glob("*.png"))
    assert sorted(names) == on_disk
    assert all((tmp_path / name).read_bytes()[:8] == PNG_MAGIC for name in names)
    return set(names)


@pytest.fixture
def sweep(tmp_path):
    scores = {(0, 1): (0.50, 0.40), (0, 2): (0.60, 0.50), (1, 1): (0.70, 0.65), (1, 2): (0.80, 0.75),
              (10, 1): (0.9, 0.85)}
    return write_results(tmp_path, [old_result(layer, seed, dev, test)
                                    for (layer, seed), (dev, test) in sorted(scores.items())])


def test_old_schema_rows_are_layers_in_numeric_order_with_seed_mean_and_std(sweep):
    rows = aggregate([json.loads(p.read_text()) for p in sweep.rglob("results.json")])
    assert [r["representation"] for r in rows] == ["0", "1", "10"]
    assert {(r["level"], r["random_init"]) for r in rows} == {("context", False)}
    assert rows[0]["seeds"] == [1, 2]
    assert rows[0]["test_micro_f1"] == pytest.approx(0.45)
    assert rows[0]["test_micro_f1_std"] == pytest.approx(statistics.stdev([0.40, 0.50]))
    assert rows[1]["dev_micro_f1"] == pytest.approx(0.75)
    assert rows[2]["test_micro_f1_std"] is None  # a single seed has no spread
    assert rows[0]["test_selectivity"] is None  # no control task in old runs


def test_selectivity_control_and_mix_weights_are_averaged_over_seeds():
    def run(seed, sel, control, weights, gamma):
        return result("mix", seed, mix_weights=weights, gamma=gamma, dev={"micro_f1": 0.5, "selectivity": sel / 2},
                      test={"micro_f1": control + sel, "selectivity": sel, "control_micro_f1": control})

    [row] = aggregate([run(0, 0.1, 0.4, [0.2, 0.8], 1.0), run(1, 0.3, 0.2, [0.4, 0.6], 2.0)])
    assert row["test_selectivity"] == pytest.approx(0.2)
    assert row["test_selectivity_std"] == pytest.approx(statistics.stdev([0.1, 0.3]))
    assert row["dev_selectivity"] == pytest.approx(0.1)
    assert row["test_control_micro_f1"] == pytest.approx(0.3)
    assert row["mix_weights"] == pytest.approx([0.3, 0.7])
    assert row["mix_weights_std"] == pytest.approx([statistics.stdev([0.2, 0.4])] * 2)
    assert row["gamma"] == pytest.approx(1.5)


def test_representations_come_in_the_papers_order():
    names = ["Rand", "BERTw", "P-BERT", "AVG-2", "AVG-10", "3", "10", "mix"]
    shuffled = random.Random(4).sample(names, len(names))
    assert shuffled != names
    assert [r["representation"] for r in aggregate([result(n) for n in shuffled])] == names
    statics = ["P-static", "GloVe", "P-Rand", "Rand", "fastText", "BERTw"]
    assert sorted(statics, key=representation_sort_key) == ["Rand", "P-Rand", "fastText", "GloVe", "P-static", "BERTw"]


def test_random_init_is_its_own_row_shown_in_the_model_name(tmp_path):
    write_results(tmp_path, [result("3", test=0.8), result("3", test=0.3, random_init=True), old_result(3, 0, .5, .6)])
    rows = write_report(tmp_path)
    assert [(r["random_init"], r["test_micro_f1"]) for r in rows] == [(False, pytest.approx(0.7)), (True, 0.3)]
    lines = (tmp_path / "report.md").read_text().splitlines()
    assert lines[4].startswith("| model | representation | dev micro-F1 |")
    assert lines[7].startswith("| minilm (random init) | 3 | 0.500 | 0.300 |")


def test_report_files(sweep, capsys):
    write_report(sweep)
    printed = capsys.readouterr().out
    assert "| 0 | 0.550 ± 0.071 | 0.450 ± 0.071 | 2 | 12 | 40 |" in printed
    assert "| dev | .550 (± .071) | .750 (± .071) | .900 |" in printed  # the paper-shaped table
    with open(sweep / "report.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [(r["layer"], r["representation"], r["level"], r["random_init"]) for r in table] == [
        ("0", "0", "context", "False"), ("1", "1", "context", "False"), ("10", "10", "context", "False")]
    assert float(table[1]["test_micro_f1"]) == pytest.approx(0.70)
    assert table[0]["test_selectivity"] == table[0]["mix_weights"] == ""
    assert {"test_selectivity_std", "dev_selectivity", "test_control_micro_f1"} <= set(table[0])
    assert (sweep / "micro_f1_by_layer.png").read_bytes()[:8] == PNG_MAGIC


def test_csv_and_long_table_carry_selectivity_and_mix_weights(tmp_path):
    scores = {"micro_f1": 0.6, "selectivity": 0.25, "control_micro_f1": 0.35}
    write_results(tmp_path, [result("mix", dev=scores, test=scores, mix_weights=[0.1, 0.2, 0.7], gamma=1.2)])
    write_report(tmp_path)
    with open(tmp_path / "report.csv") as handle:
        [row] = list(csv.DictReader(handle))
    assert row["mix_weights"] == "0.1000 0.2000 0.7000" and float(row["gamma"]) == pytest.approx(1.2)
    assert float(row["test_selectivity"]) == float(row["dev_selectivity"]) == pytest.approx(0.25)
    assert float(row["test_control_micro_f1"]) == pytest.approx(0.35)
    lines = (tmp_path / "report.md").read_text().splitlines()
    assert lines[4] == ("| representation | dev micro-F1 | test micro-F1 | test selectivity | seeds | test comb. "
                        "| test contexts |")
    assert lines[6] == "| mix | 0.600 | 0.600 | 0.250 | 1 | None | None |"


def test_seen_split_selectivity_gets_its_column_and_csv_fields(tmp_path):
    scores = {"micro_f1": 0.6, "selectivity": 0.5, "control_micro_f1": 0.1}
    seen = [{"micro_f1": 0.9, "selectivity": sel, "control_micro_f1": 0.9 - sel} for sel in (0.2, 0.4)]
    write_results(tmp_path, [result("3", seed, dev=scores, test=scores, seen=seen[seed]) for seed in (0, 1)] +
                  [result("4", dev=scores, test=scores)])  # a run without a seen split: "-" in its cell
    write_report(tmp_path)
    with open(tmp_path / "report.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert float(rows[0]["seen_selectivity"]) == pytest.approx(0.3)
    assert float(rows[0]["seen_selectivity_std"]) == pytest.approx(statistics.stdev([0.2, 0.4]))
    assert float(rows[0]["seen_control_micro_f1"]) == pytest.approx(0.6) and rows[1]["seen_selectivity"] == ""
    lines = (tmp_path / "report.md").read_text().splitlines()
    assert lines[4] == ("| representation | dev micro-F1 | test micro-F1 | test selectivity | seen selectivity | seeds "
                        "| test comb. | test contexts |")
    assert lines[6].startswith("| 3 | 0.600 ± 0.000 | 0.600 ± 0.000 | 0.500 ± 0.000 | 0.300 ± 0.141 | 2 |")
    assert lines[7].startswith("| 4 | 0.600 | 0.600 | 0.500 | - | 1 |")


def run_config(seed, mix_lr=0.001, run_dir="/runs/0"):
    """The parts of a resolved config that a sweep over seeds and one hyper-parameter changes."""
    return {"seed": seed, "paths": {"output_dir": run_dir}, "trainer": {"default_root_dir": run_dir},
            "logger": {"wandb": {"name": f"minilm-layermix-seed{seed}", "save_dir": run_dir}},
            "probe": {"control_task": {"seed": seed}, "mix": {"lr": mix_lr}},
            "representation": {"mix_lr": mix_lr}, "representations": {"mix": {"mix_lr": mix_lr}}}


def test_runs_of_one_setting_that_differ_in_a_config_value_are_not_averaged_as_seeds(tmp_path):
    runs = [result("mix", seed, 0.5, test, config=run_config(seed, lr, f"/runs/{job}"))
            for job, (seed, lr, test) in enumerate([(0, 0.01, 0.50), (1, 0.01, 0.54), (0, 0.1, 0.60), (1, 0.1, 0.70)])]
    rows = aggregate(runs)
    assert [(r["variant"], r["seeds"]) for r in rows] == [("probe.mix.lr=0.01", [0, 1]), ("probe.mix.lr=0.1", [0, 1])]
    assert [r["test_micro_f1"] for r in rows] == [pytest.approx(0.52), pytest.approx(0.65)]
    table = markdown_table(rows).splitlines()
    assert table[0].startswith("| variant | representation |") and table[2].startswith("| probe.mix.lr=0.01 | mix |")


def test_seed_run_folder_and_what_follows_from_them_make_no_variant():
    runs = [result("mix", seed, config=run_config(seed, run_dir=f"/runs/{seed}")) for seed in (0, 1, 2)]
    [row] = aggregate(runs)
    assert row["variant"] == "" and row["seeds"] == [0, 1, 2]
    assert variant_keys([*runs, result("mix", 0, config=run_config(0, 0.5, "/runs/9"))]) == ["probe.mix.lr"]


def swept_config(layer, baseline, probe="linear"):
    """The config values that `layer=L baseline=B probe=P` sets in a sweep's job (its names follow the layer)."""
    name = f"minilm-upos-layer{layer}-{probe}-seed0"
    return {"seed": 0, "layer": layer, "baseline": baseline, "probe": {"name": probe}, "run_name": name,
            "logger": {"wandb": {"name": name}}, "representations": {"layer": {"layer": layer}},
            "paths": {"output_dir": f"/sweep/{layer}-{baseline}-{probe}"}}


def test_a_baseline_swept_with_layers_is_one_run_and_run_names_make_no_variant():
    jobs = [(layer, baseline, probe) for layer in (0, 3) for baseline in (None, "bertw")
            for probe in ("linear", "mlp1")]
    results = [result("BERTw" if baseline else str(layer), probe=probe, config=swept_config(layer, baseline, probe))
               for layer, baseline, probe in jobs]
    runs, repeats = distinct_runs([{**r, "_file": f"{job}/results.json"} for job, r in enumerate(results)])
    assert repeats == ["6/results.json", "7/results.json"]  # bertw at layer=3 (linear, mlp1): layer 0's runs again
    rows = aggregate(runs)
    assert sorted((r["representation"], r["probe"], r["variant"]) for r in rows) == [
        (representation, probe, "") for representation in ("0", "3", "BERTw") for probe in ("linear", "mlp1")]
    # a layer= that a run reads keeps apart runs that nothing else tells apart
    assert variant_keys([result("3", config=swept_config(0, None)), result("3", config=swept_config(3, None))]) == [
        "layer"]


def test_paper_shaped_tables_one_per_level():
    results = [result("1", 0, 0.70, 0.60), result("0", 0, 0.60, 0.50), result("0", 1, 0.70, 0.60),
               result("P-BERT", 0, 0.672, 0.670), result("mix", 0, 0.81, 0.80),
               result("AVG-0", 0, 0.746, 0.744, level="type"), result("Rand", 0, 0.269, 0.267, level="type")]
    assert representation_tables(aggregate(results)) == [
        ("**level=context**\n\n"
        "| micro-F1 | P-BERT | 0 | 1 | mix |\n"
        "|---|---|---|---|---|\n"
        "| dev | .672 | .650 (± .071) | .700 | .810 |\n"
        "| test | .670 | .550 (± .071) | .600 | .800 |"),
        ("**level=type**\n\n"
        "| micro-F1 | Rand | AVG-0 |\n"
        "|---|---|---|\n"
        "| dev | .269 | .746 |\n"
        "| test | .267 | .744 |"),
    ]
    assert representation_tables(aggregate(results[:1])) == []  # one representation: nothing to compare


def test_context_size_table_rows_run_from_zero_to_all():
    sizes = {None: 0.9, 16: 0.85, 2: 0.8, 0: 0.6}
    results = [result("3", dev=dev, test=dev - 0.1, context_size=size) for size, dev in sizes.items()]
    results += [result("P-BERT", dev=0.7, test=0.6, context_size=size) for size in (2, 0)]
    dev_table, test_table = context_size_tables(aggregate(results))
    assert dev_table.splitlines() == [
        "dev micro-F1", "",
        "| context size | P-BERT | 3 |",
        "|---|---|---|",
        "| 0 | .700 | .600 |",
        "| 2 | .700 | .800 |",
        "| 16 | - | .850 |",
        "| all | - | .900 |",
    ]
    assert test_table.splitlines()[4] == "| 0 | .600 | .500 |"
    assert context_size_tables(aggregate(results[:1])) == []


def test_layer_sweep_writes_layer_and_per_class_plots_only(tmp_path):
    results = [result(str(layer), classes=["a"], test={"micro_f1": 0.5, "per_class_f1": [0.5]}) for layer in (0, 1)]
    results += [result("Rand", level="type"), result("AVG-0", level="type"), result("AVG-1", level="type")]
    assert plots_written(tmp_path, results) == {"micro_f1_by_layer.png", "per_class_f1_by_layer.png"}


def test_baselines_alone_write_no_plot(tmp_path):
    assert plots_written(tmp_path, [result("Rand"), result("BERTw"), result("P-BERT")]) == set()


def test_context_size_sweep_writes_the_context_size_plot(tmp_path):
    results = [result("P-BERT", context_size=size) for size in (0, 2, None)]
    assert plots_written(tmp_path, results) == {"micro_f1_by_context_size.png"}


def test_mix_sweep_writes_the_mix_weights_plot(tmp_path):
    results = [result("mix", seed, mix_weights=weights, gamma=1.0, random_init=random_init)
               for seed, weights in enumerate([[0.2, 0.3, 0.5], [0.3, 0.3, 0.4]]) for random_init in (False, True)]
    assert plots_written(tmp_path, results + [result("1"), result("2")]) == {"micro_f1_by_layer.png",
                                                                              "mix_weights.png"}


def test_varying_settings_become_columns(tmp_path):
    write_results(tmp_path, [old_result(3, 0, 0.5, 0.5, model="minilm"), old_result(3, 0, 0.6, 0.6, model="bert")])
    write_report(tmp_path)
    header = (tmp_path / "report.md").read_text().splitlines()[4]
    assert header.startswith("| model | representation |")


@pytest.mark.parametrize("folder, files, message", [
    ("sweep", {}, "no results.json below {folder} (no run there has finished). Fix: name the folder of a finished"),
    ("nowhere", None, "{folder} is not a folder. Fix: name the folder of a finished run or sweep"),
    ("sweep", {"job/results.json": '{"model": '}, "{folder}/job/results.json:1: not valid JSON"),
])
def test_the_cli_refuses_a_folder_without_results_with_one_error_line(tmp_path, capsys, folder, files, message):
    folder = tmp_path / folder
    for name, text in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    if files is not None:
        folder.mkdir(exist_ok=True)
    with pytest.raises(SystemExit) as exit_:
        main([str(folder)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(f"error: {message.format(folder=folder)}") and err.count("\n") == 1


RESULTS_FIX = "Fix: delete that results.json or rerun its job"


@pytest.mark.parametrize("record, problem", [
    ([], "it holds a list, not the results of a run"),
    ("layer 3", 'it holds the string "layer 3", not the results of a run'),
    ({"model": "minilm", "test": {"micro_f1": 0.5}}, "it has no `dev` scores"),
    (result("3", config=[1]), "its `config` is a list, not an object"),
    ({**result("3"), "test": [0.5]}, "its `test` is a list, not an object"),
    ({**result("3"), "test": None}, "its `test` is null, not an object"),
    (result("3", test=[0.5]), "its `test.micro_f1` is a list, not a number"),
    (result("3", dev={"micro_f1": "0.5"}), 'its `dev.micro_f1` is the string "0.5", not a number'),
    (result("mix", mix_weights=[0.5, "x"]), 'its `mix_weights[1]` is the string "x", not a number'),
    (result("mix", mix_weights="0.5 0.5"), "its `mix_weights` is the string"),
    ({**result("3"), "representation": 3}, "its `representation` is the value 3, not a name"),
    ({"task": "pos", "dev": {"accuracy": 0.9}, "model": "minilm"},
     'it has no `epochs_trained`, `duration_s`, which the report\'s section "Fine-tuning report" reads'),
    ({"task": "pos", "dev": {"accuracy": None}, "epochs_trained": "3", "duration_s": 1.0},
     'its `epochs_trained` is the string "3", not a number'),
    ({"analysis": "isotropy"}, 'it has no `isotropy`, which the report\'s section "Isotropy (Bis et al. 2021)" reads'),
    ({"analysis": "contextuality"}, 'it has no `layers`, which the report\'s section "Contextuality'),
    ({"analysis": "static_pc", "layer": 1}, 'it has no `static_pc`, which the report\'s section "PC static embeddings'),
    ({"analysis": "attention_similarity", "model": "minilm"}, "it has no `compare_to`, `cosine`, `layer_means`"),
    ({"task": "upos", "probe_family": "linear", "dev": {"accuracy": 0.9}},
     'it has no `representation`, which the report\'s section "Word-task probing report" reads'),
])
def test_the_cli_refuses_a_results_file_that_is_not_the_results_of_a_run(tmp_path, capsys, record, problem):
    """Valid JSON but not what the tables read: one error line naming the file, exit 2, and no report written."""
    write_results(tmp_path / "sweep", [result("3"), record])
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "sweep")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {tmp_path / 'sweep' / '1' / 'results.json'}: {problem}") and RESULTS_FIX in err
    assert not list((tmp_path / "sweep").glob("report.*"))


def test_results_that_a_section_reads_alone_but_not_together_are_named_by_their_paths(tmp_path):
    """Each file reads alone, so none is the culprit: the error named a bare "results.json"."""
    def layers_sorted(results, out_dir):  # an int beside a string cannot be sorted
        return str(sorted(result["layer"] for result in results)), []

    files = [str(tmp_path / name / "results.json") for name in ("a", "b", "c", "d", "e")]
    runs = [{"layer": 1 if index else "1", "_file": file} for index, file in enumerate(files)]
    assert written_section(layers_sorted, "Layers", runs[:1], tmp_path) == ("['1']", [])
    with pytest.raises(DataFormatError) as error:
        written_section(layers_sorted, "Layers", runs, tmp_path)
    assert error.value.path == files[0]
    assert error.value.problem.endswith(f"read beside {files[1]}, {files[2]}, {files[3]} and 1 more, though each of "
                                        "them reads alone")
    assert str(error.value).startswith(f'{files[0]}: a value that the report\'s section "Layers" cannot read '
                                       "(TypeError: ")


def test_null_config_and_reused_probes_are_read_as_absent_and_paths_are_not_read(tmp_path):
    write_results(tmp_path, [result("3", config=None, reused_probes=None, test=0.25),
                             result("3", 1, config={"paths": "runs/1", "seed": 1}, test=0.75)])
    [row] = write_report(tmp_path)
    assert row["test_micro_f1"] == 0.5 and row["seeds"] == [0, 1]


def test_broken_results_file_names_the_file(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "results.json").write_text('{"model": ')
    with pytest.raises(DataFormatError, match=r"job/results.json:1: not valid JSON.*Fix: delete the file"):
        write_report(tmp_path)


def test_per_class_f1_by_layer_averages_seeds_and_keeps_undefined():
    def run(layer, seed, per_class):
        return {"model": "m", "data": "d", "probe": "p", "pooling": "mean", "context_size": None, "layer": layer,
                "seed": seed, "classes": ["a", "b"], "test": {"micro_f1": 0.5, "per_class_f1": per_class}}

    results = [run(0, 1, [0.2, None]), run(0, 2, [0.4, None]), run(1, 1, [1.0, 0.5]), run(1, 2, [0.0, None])]
    classes, layers, grid = per_class_by_layer(results)
    assert classes == ["a", "b"] and layers == [0, 1]
    assert grid[0] == pytest.approx([0.3, 0.5])
    assert grid[1][0] is None and grid[1][1] == pytest.approx(0.5)
    assert per_class_by_layer(results + [{**run(0, 1, [0.1, 0.1]), "model": "other"}]) is None
    baselines = [{**run(None, 1, [0.9, 0.9]), "representation": "Rand"}]
    assert per_class_by_layer(results + baselines)[1] == [0, 1]  # baselines have no layer: left out


def test_a_run_moved_to_another_folder_and_its_copy_are_one_run(tmp_path, capsys):
    """The same run under two folders (moved, then the old folder restored from a backup): the run folder inside its
    values (logger, trainer) does not tell them apart."""
    first = run_config(0, run_dir="/old/place/run")
    moved = {**run_config(0, run_dir=f"{tmp_path}/moved"), "paths": {"output_dir": f"{tmp_path}/moved",
                                                                      "root_dir": "/elsewhere"}}
    write_results(tmp_path, [result("6", 0, 0.5, 0.4, config=first), result("6", 0, 0.5, 0.4, config=moved)])
    [row] = write_report(tmp_path)
    assert row["seeds"] == [0] and "Counted once: 1 results.json" in capsys.readouterr().out


def test_a_run_found_twice_is_counted_once(tmp_path, capsys):
    """A results.json copied into a second job folder (same configuration and seed) is one run, not two seeds with
    std 0; another seed of the same configuration still counts."""
    runs = [result("6", 0, 0.5, 0.4, config=run_config(0, run_dir=f"{tmp_path}/a")),
            result("6", 0, 0.5, 0.4, config=run_config(0, run_dir=f"{tmp_path}/b")),
            result("6", 1, 0.7, 0.6, config=run_config(1, run_dir=f"{tmp_path}/c"))]
    write_results(tmp_path, runs)
    [row] = write_report(tmp_path)
    assert row["seeds"] == [0, 1] and row["test_micro_f1"] == pytest.approx(0.5)
    assert "Counted once: 1 results.json" in capsys.readouterr().out


def test_a_run_relaunched_on_an_edited_data_file_is_another_run_in_a_row_of_its_own(tmp_path, capsys):
    """The same configuration and seed scored on two versions of the test file: two runs (not one found twice), each
    in a row named by the version it read, never averaged; the layer read from one version only is named too."""
    def version(test_digest):
        return [["/data/streusle/test.conllulex", test_digest], ["/data/streusle/train.conllulex", "1" * 64]]

    runs = [result("6", 0, 0.5, 0.4, config=run_config(0, run_dir=f"{tmp_path}/a"), data_files=version("a" * 64)),
            result("6", 0, 0.5, 0.6, config=run_config(0, run_dir=f"{tmp_path}/b"), data_files=version("b" * 64)),
            result("5", 0, 0.5, 0.3, config={**run_config(0, run_dir=f"{tmp_path}/c"), "layer": 5},
                   data_files=version("b" * 64))]
    write_results(tmp_path, runs)
    rows = write_report(tmp_path)
    assert "Counted once" not in capsys.readouterr().out
    assert sorted((row["representation"], row["variant"], row["test_micro_f1"]) for row in rows) == [
        ("5", "test.conllulex sha256 bbbbbbbb", 0.3), ("6", "test.conllulex sha256 aaaaaaaa", 0.4),
        ("6", "test.conllulex sha256 bbbbbbbb", 0.6)]


def test_one_layer_per_class_plot_fits_long_class_names(tmp_path):
    """A single-layer run with the 26 STREUSLE-length class names: the heatmap is laid out without matplotlib's
    "Tight layout not applied" warning (the figure is wide enough for the names, the colour bar and the title)."""
    classes = [f"n.{name}" for name in ["COMMUNICATION", "NATURALOBJECT", "PHENOMENON"] * 9][:26]
    run = {"model": "m", "data": "d", "probe": "p", "pooling": "mean", "context_size": None, "layer": 6, "seed": 0,
           "classes": classes, "test": {"micro_f1": 0.5, "per_class_f1": [0.5] * 26}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot_per_class([run], tmp_path / "per_class.png")


def test_runs_written_before_the_config_held_only_what_runs_group_with_later_ones():
    """Earlier configs also held every representation and probing a run could do (`representations`, `probings`), the
    task's name of its own (`task.probing`), every representation it could condition on (`conditionings`, and
    `conditioning: null`), every baseline's featurizer and type-level space (`baselines`, `type_spaces`, whose settings
    are the representation's now), the encoder's copies of the model's and the features' settings, train.py's
    settings of the task and the fine-tuned comparison's (null): they tell no run of theirs apart from a later run of
    the same setting."""
    def earlier(seed, task="upos"):
        return {**run_config(seed, run_dir=f"/runs/{seed}"), "task_name": "probe",
                "task": {"name": task, "probing": "words", "lr": 1e-4, "batch_size": 16, "monitor": "dev/accuracy"},
                "probings": {"words": {"seed": seed}, "sclass": {"seed": seed}},
                "conditionings": {"none": None, "layer": {"layer": None}}, "conditioning": None,
                "representations": {"layer": {"layer": -1}, "mix": {"mix_lr": 0.001}},
                "baselines": {"prand": {"dim": 300, "seed": 0, "context_size": None}, "pstatic": {"oov_seed": 0}},
                "type_spaces": {"rand": {"dim": 300, "seed": 0}}, "finetuned": None, "comparison_setup": None,
                "features": {"pooling": "mean", "encoder": {"_target_": "probing.features.encoder.WordEncoder",
                                                            "name_or_path": "minilm", "pooling": "mean"}}}

    later = {**run_config(0, run_dir="/runs/later"), "task_name": "probe", "task": {"name": "upos"},
             "representation": {"rand_dim": 300, "rand_seed": 0, "oov_seed": 0},
             "features": {"pooling": "mean", "encoder": {"_target_": "probing.features.featurizers.word_encoder"}}}
    runs = [result("mix", 0, config=earlier(0)), result("mix", 1, config=earlier(1)), result("mix", 0, config=later)]
    assert variant_keys(runs) == []
    assert distinct_runs([{**run, "_file": f"{job}/results.json"} for job, run in enumerate(runs)])[1] == [
        "2/results.json"]
    assert variant_keys([*runs[:2], result("mix", 0, config={**later, "task": {"name": "pos"}})]) == ["task.name"]
    other_seed = {**later, "representation": {"rand_dim": 300, "rand_seed": 1, "oov_seed": 0}}
    assert variant_keys([*runs[:2], result("mix", 0, config=other_seed)]) == ["representation.rand_seed"]
    trained = [result("mix", seed, config={**earlier(seed), "task_name": "train"}) for seed in (0, 1)]
    assert variant_keys([*trained, result("mix", 0, config={**later, "task_name": "train"})]) == [
        "task.batch_size", "task.lr", "task.monitor"]  # train.py reads them: runs without are another setting


def test_runs_whose_config_copied_the_probe_settings_group_with_later_ones():
    """Earlier configs copied the probe's settings into what read them (`probe.family`, `probe.module.family`, its
    `mix`, `probe.online_code`, `probe.control_task.level`, a tree task's `task.probe_family`); later ones name the
    family's factory (`probe.module._target_`). Neither tells a run apart from a run of the same setting."""
    def earlier(seed):
        config = run_config(seed, run_dir=f"/runs/{seed}")
        probe = {**config["probe"], "family": "mlp1", "module": {"family": "mlp1", "mix": {"lr": 0.001}},
                 "online_code": {"seed": seed, "level": "context"},
                 "control_task": {**config["probe"]["control_task"], "level": "context"}}
        return {**config, "probe": probe, "task": {"name": "upos", "probe_family": None}}

    later = run_config(0, run_dir="/runs/later")
    later = {**later, "probe": {**later["probe"], "module": {"_target_": "probing.probes.components.families.mlp1"}},
             "task": {"name": "upos"}}
    runs = [result("mix", 0, config=earlier(0)), result("mix", 1, config=earlier(1)), result("mix", 0, config=later)]
    assert variant_keys(runs) == []


def test_the_layer_axis_labels_at_most_sixteen_layers_on_multiples_of_a_round_step():
    assert drawn_layer_ticks(range(13)) == list(range(13))  # bert-base: every layer
    assert drawn_layer_ticks([*range(17), None]) == list(range(0, 17, 2))  # 17 layers: every 2nd; a baseline's None
    assert drawn_layer_ticks(range(31)) == list(range(0, 31, 2))  # a 30-block decoder: 0, 2, ..., 30
    assert drawn_layer_ticks(range(33)) == list(range(0, 33, 5))  # 0, 2, ..., 32 would be 17
    assert drawn_layer_ticks([3, 5, 7, 9, 11]) == [3, 5, 7, 9, 11]
    assert drawn_layer_ticks(range(1, 200)) == list(range(20, 200, 20))
    assert drawn_layer_ticks(range(1, 34, 2)) == [5, 15, 25]  # 17 odd layers: no multiple of 2, some of 5
    assert drawn_layer_ticks(range(1, 1000, 2)) == list(range(1, 1000, 64))  # no round step fits: evenly spaced
    assert drawn_layer_ticks([None]) == []  # baselines only
