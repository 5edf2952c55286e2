"""Faults a hostile user found in probe.py/extract.py: each reproduced as the user ran it, then held to one `error:`
line (exit 2), or to the results being kept, never overwritten or counted twice."""

from __future__ import annotations

import json
import os
import shutil
import sys
from types import SimpleNamespace

import pytest

from probing.data.files import write_json_atomically
from probing.errors import ConfigError
from probing.tasks import extract, probe
from probing.tasks.loggers import closing_loggers
from tests.helpers import REPO, lock_holder, run_script
from tests.helpers.runs import compose_job, fake_finetuned_model, tiny_model
from tests.helpers.stores import assert_one_line_error


@pytest.fixture
def tiny(tiny_bert_path):
    return tiny_model(tiny_bert_path)


def sweep_results(sweep):
    return {json.loads(p.read_text())["layer"]: p for p in sweep.glob("*/results.json")}


def test_a_relaunched_sweep_with_other_values_keeps_every_finished_result(tmp_path, tiny):
    sweep = tmp_path / "sweep"
    common = ["trainer.max_epochs=1", "probe.control_task.enabled=false", *tiny, f"hydra.sweep.dir={sweep}"]
    first = run_script("probe.py", "-m", "layer=0,1,2", *common, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = {layer: path.read_text() for layer, path in sweep_results(sweep).items()}
    second = run_script("probe.py", "-m", "layer=1,2", *common, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    after = sweep_results(sweep)
    assert sorted(after) == [0, 1, 2] and {layer: p.read_text() for layer, p in after.items()} == before
    assert (second.stdout + second.stderr).count("not running it again") == 2
    rows = [line for line in (sweep / "report.md").read_text().splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:4]] == ["| 0", "| 1", "| 2"]  # each layer once, one seed each
    assert all(row.split(" | ")[3] == "1" for row in rows[1:4])


def test_a_damaged_results_file_is_run_again_and_rewritten_whole(tmp_path, tiny, caplog):
    cfg = compose_job("probe", tmp_path, *tiny, "layer=1", "trainer.max_epochs=1")
    out = tmp_path / "run" / "results.json"
    out.parent.mkdir(parents=True)
    out.write_text('{"model": "minilm", "dev": {"micro_f')  # a job killed while writing it, before the fix
    results = probe.run(cfg)
    assert "is damaged" in caplog.text
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))


def test_results_are_replaced_atomically(tmp_path, monkeypatch):
    out = tmp_path / "results.json"
    write_json_atomically(out, {"layer": 1})
    monkeypatch.setattr("os.fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_json_atomically(out, {"layer": 2})
    assert json.loads(out.read_text()) == {"layer": 1} and [p.name for p in tmp_path.iterdir()] == ["results.json"]


@pytest.mark.parametrize("overrides,message", [
    (["seed=abc"], "seed='abc' is not an integer"),
    (["probe.batch_size=0"], "probe.batch_size=0 is not an integer >= 1"),
    (["trainer.max_epochs=0"], "trainer.max_epochs=0 is not an integer >= 1"),
    (["probe.control_task.enabled=no"], "probe.control_task.enabled must be true or false"),
    (["data.source.include_verbs=no"], "data.source.include_verbs must be true or false"),
    (["data.split.test_fraction=abc"], "data.split.test_fraction"),
    (["data.source._target_=probing.data.sources.NoSuchSource"], "data.source: cannot be built"),
    (["paths.store_dir=README.md"], "is a file, not a folder"),
    (["model.random_init=yes"], "model.random_init must be true or false"),
    (["probe.module.hidden_dim=0"], "probe.module.hidden_dim=0 is not an integer >= 1"),
    (["task=upos", "probe=linear", "probe.rank=-1"], "probe.rank=-1 is not an integer >= 1"),
])
def test_bad_settings_are_config_errors_naming_the_setting(tmp_path, tiny, overrides, message, monkeypatch):
    monkeypatch.chdir(REPO)  # so that README.md is a file there
    cfg = compose_job("probe", tmp_path, *tiny, "layer=1", *overrides)
    if overrides == ["paths.store_dir=README.md"]:
        cfg.features.store_dir = str(REPO / "README.md")
    with pytest.raises(ConfigError, match="Fix:") as error:
        probe.run(cfg)
    assert message in str(error.value)
    assert not (tmp_path / "run" / "results.json").exists()
    assert not (tmp_path / "run" / "csv").exists()  # refused before any logger started (W&B: no run for a typo)


def test_extract_refuses_an_unknown_split(tmp_path):
    cfg = compose_job("extract", tmp_path, "splits=[train,foo]")
    with pytest.raises(ConfigError, match=r"\['foo'\] is not a split of the data"):
        extract.run(cfg)


@pytest.mark.parametrize("script,overrides,message", [
    ("probe.py", ["seed=abc", "logger=none"], "error: seed='abc' is not an integer"),
    ("probe.py", ["+laeyr=3", "logger=none"],
     "error: +laeyr=3: the config has no setting 'laeyr'. Fix: layer (the closest name)"),
    ("extract.py", ["splits=[train,foo]"], "error: splits=['train', 'foo']"),
])
def test_the_entry_scripts_print_one_error_line_and_exit_2(tmp_path, script, overrides, message):
    result = run_script(script, *overrides, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(message) and "Traceback" not in result.stderr


def test_a_failed_job_finishes_its_wandb_run(monkeypatch):
    finished = []
    fake = SimpleNamespace(run=object(), finish=lambda exit_code: finished.append(exit_code))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with pytest.raises(RuntimeError), closing_loggers(None):
        raise RuntimeError("the job failed")
    with closing_loggers(None):
        pass
    assert finished == [1, 0]


def test_an_empty_split_is_named_before_any_store_is_made(tmp_path, tiny):
    cfg = compose_job("probe", tmp_path, *tiny, "layer=1", "data.split.dev_fraction=0.0")
    with pytest.raises(ConfigError, match="the dev split of streusle is empty"):
        probe.run(cfg)
    assert not (tmp_path / "stores").exists() or not any((tmp_path / "stores").rglob("dev.*.h5"))


def other_weights(tiny_bert_path, folder):
    """Weights of the tiny BERT's shape that are not its own (every weight moved), copied over `folder`'s."""
    other = fake_finetuned_model(tiny_bert_path, folder.parent / f"{folder.name}-other", "pos")
    shutil.copyfile(other / "model.safetensors", folder / "model.safetensors")


def retasked(tiny_bert_path, folder):
    """The task.json of a model exported by train.py, rewritten for another task."""
    (folder / "task.json").write_text(json.dumps({"task": "ner", "kind": "token", "labels": ["X"]}))


@pytest.mark.parametrize("exported,change,named", [
    (False, other_weights, "as it was then, and its weights have changed since"),
    (True, retasked, "task.json as it was then, and that file has changed since"),
])
def test_a_relaunch_refuses_the_results_of_a_model_folder_changed_since(tmp_path, tiny_bert_path, exported, change,
                                                                        named):
    """A model folder whose weights (or, exported by train.py, whose task.json) were replaced after a run: the
    relaunch into its run folder would return the old model's results."""
    model = tmp_path / "train_run" / "model"
    if exported:
        fake_finetuned_model(tiny_bert_path, model, "pos")
    else:
        shutil.copytree(tiny_bert_path, model)
    cfg = compose_job("probe", tmp_path, *tiny_model(model), "layer=1", "trainer.max_epochs=1")
    probe.run(cfg)
    out = tmp_path / "run" / "results.json"
    before = out.read_text()
    assert probe.run(cfg) == json.loads(before)  # unchanged: the finished results
    change(tiny_bert_path, model)
    with pytest.raises(ConfigError) as error:
        probe.run(cfg)
    assert_one_line_error(error.value, f"{out} holds the results of this configuration computed from", str(model),
                          named, "Fix: run into a new folder", f"delete the run folder {out.parent}")
    assert out.read_text() == before


def test_a_second_launch_into_a_running_jobs_folder_is_one_error_line_before_any_work(tmp_path, tiny):
    """Two launches into one run folder: the second trained to the end beside the first, then failed in the CSV log
    that the first was writing, which lost rows. Now it ends at once, leaving the first job's files as they were (only
    Hydra's own copy of the command line, .hydra/, is written before a job starts)."""
    run = tmp_path / "run"
    metrics = run / "csv" / "metrics.csv"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("epoch,step,dev/micro_f1\n0,9,0.25\n")  # the first job's log so far
    with lock_holder(run / "job.lock") as first:
        result = run_script("probe.py", *tiny, "layer=1", "trainer.max_epochs=1", f"hydra.run.dir={run}",
                            cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert errors == [result.stderr.strip().splitlines()[-1]] == [
            f"error: {run}: another job (pid {first.pid}) is running in this run folder. Fix: wait for it to finish "
            "(a relaunch then skips or resumes it), or run into a new folder (hydra.run.dir=... or "
            "hydra.sweep.dir=...)"]
    assert metrics.read_text() == "epoch,step,dev/micro_f1\n0,9,0.25\n"
    assert sorted(path.name for path in run.iterdir()) == [".hydra", "csv", "job.lock", "probe.log"]
    assert not (tmp_path / "stores").exists()  # nothing extracted either


def test_a_job_whose_folder_is_held_by_a_killed_one_runs(tmp_path, tiny):
    """The lock goes with the process that held it: killed mid-run, it leaves its lock file, which blocks no one."""
    cfg = compose_job("probe", tmp_path, *tiny, "layer=1", "trainer.max_epochs=1")
    run = tmp_path / "run"
    run.mkdir()
    with lock_holder(run / "job.lock") as first:
        with pytest.raises(ConfigError) as error:
            probe.run(cfg)
        assert_one_line_error(error.value, f"{run}: another job (pid {first.pid}) is running in this run folder")
        assert [path.name for path in run.iterdir()] == ["job.lock"]
        first.kill()
        first.wait()
        results = probe.run(cfg)
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    assert (run / "job.lock").read_text() == f"{os.getpid()}\n"  # this process held it last
