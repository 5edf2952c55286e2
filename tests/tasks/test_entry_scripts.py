"""The entry scripts as a user runs them: configs compose, user errors are one clear line, the sweep reports.
(The functions of probing/cli/ are tested in tests/test_cli.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.helpers import FIXTURE_STREUSLE, REPO, run_script
from tests.helpers.runs import tiny_model


@pytest.mark.parametrize("config,overrides", [
    ("probe", []),
    ("probe", ["experiment=quickstart"]),
    ("probe", ["model=bert", "data=conll2003", "trainer=gpu", "logger=wandb"]),
    ("probe", ["model=roberta", "data=wikipse", "trainer=gpu", "logger=none"]),
    ("probe", ["model=gpt2", "experiment=layer_sweep", "logger=csv", "trainer=cpu"]),
    ("extract", ["data=conll2003"]),
])
def test_configs_compose(config, overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config, overrides=overrides)
    assert cfg.model.name_or_path and cfg.data.source._target_.startswith("probing.data.sources.")
    if config == "probe":
        assert cfg.probe.module.hidden_dim == 1024 and cfg.probe.module.optimizer.lr == pytest.approx(1e-3)


def test_layer_out_of_range_is_one_clear_line(tmp_path, tiny_bert_path):
    result = run_script("probe.py", f"model.name_or_path={tiny_bert_path}", f"data.source.paths=[{FIXTURE_STREUSLE}]",
                        "layer=5", "logger=none", cwd=tmp_path)
    assert result.returncode == 2
    assert "layer=5 is not a layer of" in result.stderr and "0..2" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_misspelt_key_is_one_clear_line_before_anything_runs(tmp_path):
    result = run_script("train.py", "trainer.max_epoch=3", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: trainer.max_epoch=3: trainer has no setting 'max_epoch'. Fix: trainer.max_epochs (the closest name), "
        "or +trainer.max_epoch=... to pass lightning.Trainer an argument that trainer does not list"]
    assert not (tmp_path / "logs").exists()


def test_unknown_model_offline_is_one_clear_line(tmp_path):
    result = run_script("probe.py", "model=bert", "logger=none", cwd=tmp_path)
    assert result.returncode == 2
    assert "bert-base-uncased" in result.stderr and "model=minilm" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_data_file_names_file_and_key(tmp_path):
    missing = tmp_path / "nope.conllulex"
    result = run_script("extract.py", f"data.source.paths=[{missing}]", cwd=tmp_path)
    assert result.returncode == 2
    assert str(missing) in result.stderr and "data.source.paths" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_minilm_sweep_end_to_end(tmp_path, minilm_path):
    """Two layers of the packaged MiniLM on the bundled sample: results.json, stores, report; then a refused store."""
    sweep = tmp_path / "sweep"
    result = run_script("probe.py", "-m", "layer=0,4", "trainer.max_epochs=25", "callbacks=early_stopping",
                        "callbacks.early_stopping.patience=8", "logger=csv", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = {r["layer"]: r for r in (json.loads(p.read_text()) for p in sweep.glob("*/results.json"))}
    assert sorted(results) == [0, 4]
    for r in results.values():
        assert r["model"] == "minilm" and r["data"] == "streusle" and r["probe"] == "sclass_mlp" and r["seed"] == 0
        assert len(r["classes"]) == 26 and len(r["test"]["per_class_f1"]) == 26
        assert 0.0 < r["test"]["micro_f1"] <= 1.0 and r["test"]["n_combinations"] > 150
        assert r["test"]["n_contexts"] == r["data_summary"]["test"]["contexts"] - r["extraction_skipped_rows"]["test"]
        assert all(Path(p).is_file() for p in r["stores"].values())
    # The middle layer beats the uncontextualised embeddings (the paper's shape; margin seen here is ~0.1).
    assert results[4]["test"]["micro_f1"] > results[0]["test"]["micro_f1"]
    assert (sweep / "report.csv").is_file() and (sweep / "micro_f1_by_layer.png").is_file()
    assert (sweep / "per_class_f1_by_layer.png").is_file()
    assert "| 4 |" in result.stdout
    [layer_0] = [path for path in sweep.iterdir() if ",layer=0," in path.name]  # folders named by overrides
    assert (layer_0 / "csv" / "metrics.csv").is_file()

    # a store whose recorded request differs from the run's (its max_length edited to 64) is refused, not reused
    import h5py

    with h5py.File(results[4]["stores"]["train"], "r+") as store:
        store.attrs["max_length"] = 64
    refused = run_script("probe.py", "layer=4", "logger=none", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "max_length: store has 64, request has 128" in refused.stderr


def test_finished_job_is_not_run_again(tmp_path, tiny_bert_path):
    """A relaunched run into a folder that holds its results.json skips; another configuration there is refused
    (it would overwrite the finished results)."""
    common = [f"model.name_or_path={tiny_bert_path}", "trainer.max_epochs=2", "logger=csv",
              f"hydra.run.dir={tmp_path / 'run'}"]
    first = run_script("probe.py", "layer=1", *common, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    results_file = tmp_path / "run" / "results.json"
    results = json.loads(results_file.read_text())
    assert results["config"]["layer"] == 1 and results["config"]["trainer"]["max_epochs"] == 2
    assert results["epochs_trained"] == 2
    written = results_file.stat().st_mtime_ns

    again = run_script("probe.py", "layer=1", *common, cwd=tmp_path)
    assert again.returncode == 0 and "not running it again" in again.stderr + again.stdout
    assert results_file.stat().st_mtime_ns == written

    other = run_script("probe.py", "layer=2", *common, cwd=tmp_path)
    assert other.returncode == 2 and "holds the results of another configuration" in other.stderr
    assert "Traceback" not in other.stderr and results_file.stat().st_mtime_ns == written


def test_each_data_selection_gets_its_own_store(tmp_path, tiny_bert_path):
    """Another split seed is another set of records: a store of its own, not a refusal or a silent reuse."""
    for seed in (0, 1, 0):
        result = run_script("extract.py", f"model.name_or_path={tiny_bert_path}", f"data.split.seed={seed}",
                            cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    stores = sorted(p.name for p in (tmp_path / "stores").rglob("*.h5"))
    assert len(stores) == 6 and len({name.split(".")[3] for name in stores}) >= 2
    assert (result.stdout + result.stderr).count(", 0 computed,") == 3  # seed 0 again: every split reused


def test_a_bad_value_of_a_command_line_sweep_axis_is_one_error_line_before_any_job(tmp_path, tiny_bert_path):
    empty, other = tmp_path / "empty", tmp_path / "other"
    empty.mkdir(), other.mkdir()
    result = run_script("probe.py", "experiment=zhao2020_fig6", f"finetuned=[{empty}],[{other}]",
                        *tiny_model(tiny_bert_path), f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: the job with finetuned=['{empty}']: finetuned: {empty} holds no model"), lines
    assert not list((tmp_path / "sweep").glob("**/results.json"))
