"""Every experiment preset of conf/experiment run end to end as a user runs it (`python probe.py experiment=<preset>`):
a Hydra multirun on the tiny random BERT (hidden states 0..2) and the small STREUSLE fixture, a results.json in each
job folder and the report in the sweep folder, checked against what the preset is for."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from probing.config import job_dir_name
from tests.helpers import FIXTURE_STREUSLE, run_script
from tests.helpers.runs import fake_finetuned_model, tiny_model
from tests.helpers.tiny_decoders import save_tiny_llama

PRESETS = sorted(path.stem for path in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml"))
REPORT_FILES = ("report.md", "report.csv", "micro_f1_by_layer.png")
# A quick run: the fixture's six train, one dev and two test words, one epoch, no control task unless it is tested.
QUICK = ["trainer.max_epochs=1", "probe.control_task.enabled=false"]


def run_preset(tmp_path: Path, tiny_bert_path: Path, preset: str, *overrides: str) -> tuple[Path, list[dict]]:
    """Run `probe.py experiment=<preset>` on the tiny model and the fixture data; check what every sweep leaves
    behind (a results.json with a test micro-F1 in [0, 1] in the folder named after each job's overrides, the report
    with one row per job) and return the sweep folder and the jobs' results."""
    sweep = tmp_path / "sweep"
    result = run_script("probe.py", f"experiment={preset}", *tiny_model(tiny_bert_path),
                        f"data.source.paths=[{FIXTURE_STREUSLE}]", *overrides, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    paths = sorted(sweep.glob("*/results.json"))
    results = [json.loads(path.read_text()) for path in paths]
    for path, r in zip(paths, results):
        overrides_dirname = OmegaConf.load(path.parent / ".hydra" / "hydra.yaml").hydra.job.override_dirname
        assert path.parent.name == job_dir_name(overrides_dirname), (path, overrides_dirname)
        assert f"experiment={preset}" in overrides_dirname
        assert 0.0 <= r["test"]["micro_f1"] <= 1.0 and r["test"]["n_contexts"] > 0, path
        assert all(r["data_summary"][split]["words"] > 0 for split in ("train", "dev", "test")), path
    for name in REPORT_FILES:
        assert (sweep / name).is_file(), name
    with open(sweep / "report.csv", newline="", encoding="utf-8") as handle:
        assert len(list(csv.DictReader(handle))) == len(results)
    assert f"{len(results)} runs from `{sweep}`" in (sweep / "report.md").read_text()
    return sweep, results


def by_representation(results: list[dict]) -> dict[str, dict]:
    by_name = {r["representation"]: r for r in results}
    assert len(by_name) == len(results), sorted(r["representation"] for r in results)
    return by_name


def test_every_preset_is_run_here():
    tested = {name.removeprefix("test_").removesuffix("_preset") for name in globals()
              if name.startswith("test_") and name.endswith("_preset")}
    assert sorted(tested) == PRESETS


def test_truth_quickstart_preset(tmp_path):
    """truth_quickstart with a tiny random Llama in place of SmolLM2 (no GGUF file) and its layers swept in place of
    SmolLM2's 31: a linear statement probe of each layer with its control task on the bundled number comparisons, and
    the statement report of the sweep."""
    sweep, model = tmp_path / "sweep", save_tiny_llama(tmp_path / "llama", 2)
    overrides = [f"model.name_or_path={model}", "model.gguf_file=null", "model.num_layers=3", "logger=csv",
                 "layer=0,1,2", "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}"]
    result = run_script("probe.py", "experiment=truth_quickstart", *overrides, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    by_layer = {r["layer"]: r for r in map(json.loads, map(Path.read_text, sweep.glob("*/results.json")))}
    assert sorted(by_layer) == [0, 1, 2]
    assert {(r["kind"], r["task"], r["data"], r["probe"]) for r in by_layer.values()} == {
        ("statement_probe", "truth", "number_comparisons", "linear")}
    assert all(r["control_task"] == {"kind": "shuffled_labels", "seed": 0} for r in by_layer.values())
    # at the embeddings every statement's last token is the same ".": one vector for all, so the probe is at chance
    assert by_layer[0]["test"]["accuracy"] == 0.5
    assert "3 runs from" in (sweep / "report.md").read_text()


def test_layer_sweep_preset(tmp_path, tiny_bert_path):
    """layer_sweep: every hidden state of the chosen model (model.num_layers=3: 0..2), nothing else."""
    sweep, results = run_preset(tmp_path, tiny_bert_path, "layer_sweep", *QUICK)
    runs = by_representation(results)
    assert sorted(runs) == ["0", "1", "2"]
    assert all(r["layer"] == int(name) and r["level"] == "context" for name, r in runs.items())
    assert "| micro-F1 | 0 | 1 | 2 |" in (sweep / "report.md").read_text()
    assert (sweep / "per_class_f1_by_layer.png").is_file()


def test_quickstart_preset(tmp_path, tiny_bert_path):
    """quickstart with the tiny model in place of MiniLM: every layer of the chosen model, with early stopping and
    the control task."""
    sweep, results = run_preset(tmp_path, tiny_bert_path, "quickstart", "trainer.max_epochs=2")
    runs = by_representation(results)
    assert sorted(runs) == ["0", "1", "2"]
    for r in runs.values():
        assert r["model_name_or_path"] == str(tiny_bert_path) and r["data"] == "streusle"
        stopping = r["config"]["callbacks"]["early_stopping"]
        assert stopping["_target_"] == "lightning.pytorch.callbacks.EarlyStopping"
        assert stopping["monitor"] == "dev/micro_f1" and stopping["mode"] == "max" and stopping["patience"] == 6
        assert r["config"]["trainer"]["max_epochs"] == 2 and 1 <= r["epochs_trained"] <= 2
        assert r["test"]["selectivity"] == pytest.approx(r["test"]["micro_f1"] - r["test"]["control_micro_f1"])
    assert "test selectivity" in (sweep / "report.md").read_text()


def test_zhao2020_table5_preset(tmp_path, tiny_bert_path):
    """zhao2020_table5: type level, one vector per word, in the spaces AVG-0..2, Rand and BERTw, laid out as Table 5."""
    sweep, results = run_preset(tmp_path, tiny_bert_path, "zhao2020_table5", *QUICK)
    runs = by_representation(results)
    assert sorted(runs) == ["AVG-0", "AVG-1", "AVG-2", "BERTw", "Rand"]
    for r in runs.values():
        assert r["level"] == "type" and r["test"]["n_contexts"] == r["data_summary"]["test"]["words"]
    assert [runs[f"AVG-{layer}"]["layer"] for layer in range(3)] == [0, 1, 2]
    report = (sweep / "report.md").read_text()
    assert "## By representation" in report and "| micro-F1 | Rand | BERTw | AVG-0 | AVG-1 | AVG-2 |" in report


def test_zhao2020_table6_preset(tmp_path, tiny_bert_path):
    """zhao2020_table6: layers 0..2, their scalar mix and the baselines P-Rand, P-BERT, BERTw, laid out as Table 6."""
    sweep, results = run_preset(tmp_path, tiny_bert_path, "zhao2020_table6", *QUICK)
    runs = by_representation(results)
    assert sorted(runs) == ["0", "1", "2", "BERTw", "P-BERT", "P-Rand", "mix"]
    assert {r["layer"] for r in runs.values()} == {0, 1, 2, "mix", "prand", "pbert", "bertw"}
    assert all(r["level"] == "context" for r in runs.values())
    mix = runs["mix"]
    assert len(mix["mix_weights"]) == 3 and sum(mix["mix_weights"]) == pytest.approx(1.0)
    report = (sweep / "report.md").read_text()
    assert "## By representation" in report and "| micro-F1 | P-Rand | BERTw | P-BERT | 0 | 1 | 2 | mix |" in report
    assert (sweep / "mix_weights.png").is_file()


def test_zhao2020_fig5_preset(tmp_path, tiny_bert_path):
    """zhao2020_fig5: every layer 0..2 and P-BERT at each context size, with the report's context-size table and
    plot. The preset's seven context sizes are cut to 0 and the whole sentence on the command line
    (hydra.sweeper.params.context_size='0,all') to keep the test short; the layers are the preset's own."""
    sweep, results = run_preset(tmp_path, tiny_bert_path, "zhao2020_fig5", *QUICK,
                                "hydra.sweeper.params.context_size='0,all'")
    runs = {(r["representation"], r["context_size"]): r for r in results}
    assert len(runs) == len(results)
    assert set(runs) == {(name, size) for name in ("0", "1", "2", "P-BERT") for size in (0, None)}  # None: all
    stores = {Path(r["stores"]["dev"]).name.split(".")[2] for r in results}
    assert stores == {"ctx-0", "ctx-all"}  # a store per context size
    report = (sweep / "report.md").read_text()
    assert "## By context size" in report and "| context size | P-BERT | 0 | 1 | 2 |" in report
    assert (sweep / "micro_f1_by_context_size.png").is_file()


@pytest.fixture(scope="module")
def train_runs(tmp_path_factory, tiny_bert_path) -> list[Path]:
    """Two train.py-like run folders (POS and SST-2) holding tiny fine-tuned models."""
    root = tmp_path_factory.mktemp("train_runs")
    runs = []
    for seed, task in enumerate(("pos", "sst2"), start=1):
        (root / task / "model").mkdir(parents=True)
        fake_finetuned_model(tiny_bert_path, root / task / "model", task, seed=seed)
        runs.append(root / task)
    return runs


def test_zhao2020_fig6_preset(tmp_path, tiny_bert_path, train_runs):
    """zhao2020_fig6: the pretrained model and, per fine-tuned model, setups (a) and (b) of every layer."""
    sweep = tmp_path / "sweep"
    finetuned = "[" + ",".join(str(run) for run in train_runs) + "]"
    result = run_script("probe.py", "experiment=zhao2020_fig6", f"finetuned={finetuned}", *tiny_model(tiny_bert_path),
                        "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = [json.loads(path.read_text()) for path in sweep.glob("*/*/results.json")]  # <setup>/<overrides>/
    runs = {f"{Path(r['config']['paths']['output_dir']).parent.name}/layer={r['layer']}": r for r in results}
    assert len(runs) == len(results)
    setups = ("pretrained", "pos-a", "pos-b", "sst2-a", "sst2-b")
    assert sorted(runs) == sorted(f"{setup}/layer={layer}" for setup in setups for layer in range(3))
    for layer in range(3):
        pretrained = runs[f"pretrained/layer={layer}"]
        assert pretrained["finetuned_task"] is None and "probes_file" in pretrained
        for task, train_run in zip(("pos", "sst2"), train_runs):
            setup_a, setup_b = runs[f"{task}-a/layer={layer}"], runs[f"{task}-b/layer={layer}"]
            assert setup_a["reused_probes"]["path"] == pretrained["probes_file"]
            assert setup_a["epochs_trained"] == 0 and setup_b["epochs_trained"] == 2
            for run in (setup_a, setup_b):
                assert run["finetuned_task"] == task and run["model_name_or_path"] == str(train_run / "model")
                assert run["layer"] == layer
    # the report: one table per fine-tuned model, the differences computed from the runs' own scores
    report = (sweep / "report.md").read_text()
    assert "Probing fine-tuned encoders" in report and "Fine-tuned on pos" in report and "Fine-tuned on sst2" in report
    assert (sweep / "finetuned_probing_by_layer.png").is_file()
    with open(sweep / "finetuned_probing.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["split"] == "test"]
    assert len(rows) == 6
    for row in rows:
        pretrained = runs[f"pretrained/layer={row['layer']}"]["test"]["micro_f1"]
        setup_a = runs[f"{row['task']}-a/layer={row['layer']}"]["test"]["micro_f1"]
        assert float(row["pretrained"]) == pytest.approx(pretrained)
        assert float(row["(a) - pretrained"]) == pytest.approx(setup_a - pretrained)

    written = {path: path.stat().st_mtime_ns for path in sweep.glob("*/*/results.json")}
    relaunch = run_script("probe.py", "experiment=zhao2020_fig6", f"finetuned={finetuned}",
                          *tiny_model(tiny_bert_path), "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert relaunch.returncode == 0, relaunch.stderr[-2000:]
    assert {path: path.stat().st_mtime_ns for path in sweep.glob("*/*/results.json")} == written  # all skipped


def test_zhao2020_fig6_refuses_a_folder_without_a_fine_tuned_model(tmp_path, tiny_bert_path):
    result = run_script("probe.py", "experiment=zhao2020_fig6", f"finetuned=[{tmp_path}]", *tiny_model(tiny_bert_path),
                        cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert str(tmp_path) in result.stderr and "task.json" in result.stderr and "Traceback" not in result.stderr


def test_zhao2020_table4_preset(tmp_path, tiny_bert_path):
    """train.py's preset: the paper's Table 4 (lr 5e-5, 5 epochs, each task's batch size) in place of the defaults
    chosen for the bundled sample; the run itself goes through as a user types it."""
    from tests.helpers.runs import compose_job

    for task, batch_size in (("pos", 150), ("ner", 32), ("sst2", 200), ("mrpc", 350)):
        preset = compose_job("train", tmp_path, f"task={task}", "experiment=zhao2020_table4")
        default = compose_job("train", tmp_path, f"task={task}")
        assert (preset.task.batch_size, preset.finetune.module.optimizer.lr, preset.trainer.max_epochs) == \
            (batch_size, 5e-5, 5)
        assert default.trainer.max_epochs == 3 and default.task.batch_size in (16, 32)
    run = tmp_path / "run"
    result = run_script("train.py", "experiment=zhao2020_table4", f"model.name_or_path={tiny_bert_path}", "logger=csv",
                        f"hydra.run.dir={run}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((run / "results.json").read_text())
    assert results["epochs_trained"] == 5 and results["config"]["task"]["batch_size"] == 150
    assert results["data_summary"]["train"]["examples"] == 651
