"""train.py as a user runs it: fine-tune, keep the best dev epoch, export a model that probing loads, resume after
a crash, DDP under a multirun, and bad settings as one error line."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from functools import partial
from pathlib import Path

import h5py
import pytest
import torch
from transformers import BertConfig, BertModel

from probing.errors import CheckpointError, ConfigError
from probing.finetune.checkpoints import ContinuedCSVLog, record_hash
from probing.finetune.module import FineTuner
from probing.tasks import extract, train
from tests.helpers import FIXTURE_STREUSLE, FIXTURES, run_script
from tests.helpers.runs import compose_job


@pytest.fixture
def tiny(tiny_bert_path):
    return [f"model.name_or_path={tiny_bert_path}", "logger=csv", "task.batch_size=64"]


def test_fine_tuning_exports_a_model_that_extraction_loads(tmp_path, tiny, tiny_bert_path):
    results = train.run(compose_job("train", tmp_path, *tiny, "trainer.max_epochs=2"))
    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["task"] == "pos" and results["epochs_trained"] == 2 and results["best_epoch"] in (0, 1)
    assert 0.0 <= results["dev"]["accuracy"] <= 1.0 and results["attention_window"] is None
    assert results["data_summary"]["train"]["examples"] == 651 and results["precision"] == "32-true"
    assert Path(results["model_dir"]) == run / "model" and (run / "checkpoints" / "best.ckpt").is_file()
    mini = f"data.source.paths=[{FIXTURE_STREUSLE}]"
    stores = extract.run(compose_job("extract", tmp_path / "probe", f"model.name_or_path={run / 'model'}", mini))
    original = extract.run(compose_job("extract", tmp_path / "probe", f"model.name_or_path={tiny_bert_path}", mini))
    with h5py.File(stores["dev"]) as tuned, h5py.File(original["dev"]) as pretrained:
        assert tuned.attrs["weights_sha256"] != pretrained.attrs["weights_sha256"]
        assert tuned["features"].shape == pretrained["features"].shape


def test_an_interrupted_run_resumes_from_its_last_checkpoint(tmp_path, tiny, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="probing")
    cfg = compose_job("train", tmp_path, *tiny, "trainer.max_epochs=3")
    original, steps = FineTuner.training_step, []

    def crash_in_epoch_two(module, batch, batch_idx):
        if module.current_epoch == 2:
            raise RuntimeError("the machine went away")
        return original(module, batch, batch_idx)

    def counted(module, batch, batch_idx):
        steps.append(module.current_epoch)
        return original(module, batch, batch_idx)

    monkeypatch.setattr(FineTuner, "training_step", crash_in_epoch_two)
    with pytest.raises(RuntimeError, match="went away"):
        train.run(cfg)
    checkpoints = tmp_path / "run" / "checkpoints"
    best_before = (checkpoints / "best.ckpt").read_bytes()
    assert not (tmp_path / "run" / "results.json").exists()
    monkeypatch.setattr(FineTuner, "training_step", counted)
    results = train.run(cfg)
    assert "resuming from" in caplog.text and results["epochs_trained"] == 3
    assert set(steps) == {2} and len(steps) == 11  # only the third epoch ran again: 651 sentences / 64 a batch
    if results["best_epoch"] < 2:  # the best epoch came before the crash: its checkpoint was kept as it was
        assert (checkpoints / "best.ckpt").read_bytes() == best_before


@pytest.mark.parametrize("overrides,message", [
    (["finetune.attention_window=-1"], "finetune.attention_window=-1 is not an attention window"),
    (["finetune.attention_window=abc"], "finetune.attention_window='abc'"),
    (["finetune.attention_window=2", "finetune.attention_policy=none"],
     "finetune.attention_policy='none' is not an attention policy. Fix: finetune.attention_policy=sink"),
    (["task=sst2", f"data.data_dir={FIXTURES / 'data' / 'glue' / 'SST-2'}", "finetune.attention_window=2"],
     "word-level tasks only"),
    (["finetune.isotropy_reg=-0.1"], "finetune.isotropy_reg=-0.1 is not a number in [0, inf)"),
    (["finetune.isotropy_reg=nan"], "finetune.isotropy_reg=nan is not a number in [0, inf)"),
    (["finetune.resume=sometimes"], "finetune.resume='sometimes' is not a way to resume"),
    (["task.batch_size=0"], "task.batch_size=0 is not an integer >= 1"),
    (["task.max_length=2"], "task.max_length=2 is not an integer >= 3"),
    (["trainer.max_epochs=0"], "trainer.max_epochs=0 is not an integer >= 1"),
    (["finetune.checkpoint_every_n_steps=0"], "finetune.checkpoint_every_n_steps=0 is not an integer >= 1"),
    (["finetune.checkpoint_every_n_steps=2.5"], "finetune.checkpoint_every_n_steps=2.5 is not an integer >= 1"),
    (["trainer.accelerator=cpu", "trainer.devices=512"], "trainer.devices=512"),
    (["trainer.accelerator=cpu", "trainer.precision=16-mixed"], "trainer.precision=16-mixed"),
    (["model.dtype=bf16"], "model.dtype=bf16, model.device_map=None: train.py loads the weights in float32"),
    (["+model.gguf_file=m.gguf"], "is a GGUF file, which train.py does not fine-tune"),
])
def test_bad_settings_are_refused_before_training(tmp_path, tiny, overrides, message):
    with pytest.raises(ConfigError, match="Fix:") as error:
        train.run(compose_job("train", tmp_path, *tiny, *overrides))
    assert message in str(error.value) and not (tmp_path / "run" / "results.json").exists()


def test_a_batch_that_the_processes_cannot_share_names_the_task_setting(tmp_path, tiny, monkeypatch):
    """The datamodule refuses its batch_size once the trainer knows its processes (3 here, as if DDP ran three), and
    train.py names it task.batch_size."""
    import lightning as L

    monkeypatch.setattr(L.Trainer, "world_size", property(lambda self: 3))
    with pytest.raises(ConfigError) as error:
        train.run(compose_job("train", tmp_path, *tiny))
    assert str(error.value) == ("task.batch_size=64 is the global batch and must divide evenly over 3 processes. "
                                "Fix: a multiple of 3")


def test_ddp_under_a_multirun_runs_each_job_once_in_two_processes(tmp_path, tiny):
    sweep = tmp_path / "sweep"
    result = run_script("train.py", "-m", "finetune.attention_window=0,null", "trainer=ddp", "trainer.devices=2",
                        "trainer.accelerator=cpu", "trainer.max_epochs=1", *tiny, f"hydra.sweep.dir={sweep}",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [json.loads(path.read_text()) for path in sweep.glob("*/results.json")]
    assert sorted(str(r["attention_window"]) for r in runs) == ["0", "None"]
    assert all(r["devices"] == 2 for r in runs)
    assert result.stdout.count("Launching 2 jobs locally") + result.stderr.count("Launching 2 jobs locally") == 1


def test_checkpoints_of_another_configuration_are_refused(tmp_path, tiny, monkeypatch):
    def crash(module, batch, batch_idx):
        raise RuntimeError("stopped")

    monkeypatch.setattr(FineTuner, "training_step", crash)
    with pytest.raises(RuntimeError):
        train.run(compose_job("train", tmp_path, *tiny, "trainer.max_epochs=1", "finetune.checkpoint_every_n_steps=1"))
    monkeypatch.undo()
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "last.ckpt").write_bytes(b"the state of an interrupted run")
    with pytest.raises(ConfigError, match="checkpoints of a run of another configuration"):
        train.run(compose_job("train", tmp_path, *tiny, "trainer.max_epochs=2"))
    assert (checkpoints / "last.ckpt").read_bytes() == b"the state of an interrupted run"


# The run, small: 2 epochs of 6 batches of 16, step.ckpt every 2 steps, 3 dev batches.
EXACT = ["task.batch_size=16", "trainer.max_epochs=2", "++trainer.limit_train_batches=6",
         "++trainer.limit_val_batches=3", "finetune.checkpoint_every_n_steps=2"]


def interrupted(monkeypatch, hook: str, when) -> None:
    """Make FineTuner.<hook> fail when `when(module)` holds: the run dies as under a kill, with no checkpoint taken."""
    original = getattr(FineTuner, hook)

    def failing(module, batch, batch_idx):
        if when(module):
            raise RuntimeError("killed")
        return original(module, batch, batch_idx)

    monkeypatch.setattr(FineTuner, hook, failing)


def final_state(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_bert_path):
    folder = tmp_path_factory.mktemp("uninterrupted")
    results = train.run(compose_job("train", folder, f"model.name_or_path={tiny_bert_path}", "logger=csv", *EXACT))
    return (results, final_state(folder / "run"), (folder / "run" / "model" / "model.safetensors").read_bytes(),
            csv_log(folder / "run"))


def csv_log(run: Path) -> list[dict[str, str]]:
    with open(run / "csv" / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


EPOCH_MEANS = ("train/loss_epoch", "train/task_loss_epoch")


def without_epoch_means_of(epoch: str, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Lightning does not checkpoint its running means: an epoch resumed mid-way averages the steps after the resume."""
    return [{key: "" if key in EPOCH_MEANS and row["epoch"] == epoch else value for key, value in row.items()}
            for row in rows]


def without_end_of_epoch(epoch: str, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Resumed from the checkpoint of an epoch's last step, Lightning goes on to the next epoch without validating
    that one or logging its means (the weights are still those of an uninterrupted run)."""
    return [row for row in rows if not (row["epoch"] == epoch and not row["train/loss_step"])]


@pytest.mark.parametrize("hook,when,resumed_from,lightning_differences", [
    # mid-epoch: step.ckpt after 8 steps, 2 of epoch 1
    ("training_step", lambda m: m.global_step == 9, "step.ckpt", partial(without_epoch_means_of, "1")),
    # epoch 1's first step: last.ckpt of epoch 0's end
    ("training_step", lambda m: m.global_step == 6, "last.ckpt", lambda rows: rows),
    # epoch 0 trained, not validated: step.ckpt of its last step
    ("validation_step", lambda m: not m.trainer.sanity_checking, "step.ckpt", partial(without_end_of_epoch, "0")),
])
def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path, tiny, monkeypatch, caplog,
                                                                       uninterrupted, hook, when, resumed_from,
                                                                       lightning_differences):
    caplog.set_level(logging.INFO, logger="probing")
    cfg = compose_job("train", tmp_path, *tiny, *EXACT)
    interrupted(monkeypatch, hook, when)
    with pytest.raises(RuntimeError, match="killed"):
        train.run(cfg)
    monkeypatch.undo()
    results = train.run(cfg)
    assert f"resuming from {tmp_path / 'run' / 'checkpoints' / resumed_from}" in caplog.text
    expected, weights, exported, log = uninterrupted
    assert results["dev"] == expected["dev"] and results["best_epoch"] == expected["best_epoch"]
    state = final_state(tmp_path / "run")
    assert state.keys() == weights.keys() and all(torch.equal(state[name], weights[name]) for name in weights)
    assert (tmp_path / "run" / "model" / "model.safetensors").read_bytes() == exported
    # The CSV log keeps the rows logged before the interruption: the same rows as the uninterrupted run's.
    assert lightning_differences(csv_log(tmp_path / "run")) == lightning_differences(log)
    assert not (tmp_path / "run" / "csv" / ContinuedCSVLog.PREVIOUS).exists()


def test_a_truncated_checkpoint_is_one_error_and_the_run_can_resume_from_best(tmp_path, tiny, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="probing")
    cfg = compose_job("train", tmp_path, *tiny, *EXACT)
    interrupted(monkeypatch, "training_step", lambda m: m.global_step == 6)  # last.ckpt (epoch 0's end) is newest
    with pytest.raises(RuntimeError, match="killed"):
        train.run(cfg)
    monkeypatch.undo()
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:last.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=f"{last} is damaged") as error:
        train.run(cfg)
    assert "finetune.resume=best" in str(error.value) and "finetune.resume=restart" in str(error.value)
    results = train.run(compose_job("train", tmp_path, *tiny, *EXACT, "finetune.resume=best"))
    assert f"resuming from {last.parent / 'best.ckpt'}" in caplog.text and results["epochs_trained"] == 2
    assert "resume" not in results["config"]["finetune"]  # how a run goes on is not part of what it is


def test_random_bytes_in_a_checkpoint_are_detected_and_a_restart_trains_from_the_start(tmp_path, tiny, monkeypatch,
                                                                                        caplog, uninterrupted):
    caplog.set_level(logging.INFO, logger="probing")
    cfg = compose_job("train", tmp_path, *tiny, *EXACT)
    interrupted(monkeypatch, "training_step", lambda m: m.global_step == 9)  # step.ckpt (after 8 steps) is newest
    with pytest.raises(RuntimeError, match="killed"):
        train.run(cfg)
    monkeypatch.undo()
    step = tmp_path / "run" / "checkpoints" / "step.ckpt"
    data = bytearray(step.read_bytes())
    data[len(data) // 2] ^= 0x01  # a flipped bit in the weights: torch.load would read it without complaint
    step.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{step} is damaged"):
        train.run(cfg)
    results = train.run(compose_job("train", tmp_path, *tiny, *EXACT, "finetune.resume=restart"))
    assert "resuming from" not in caplog.text and results["dev"] == uninterrupted[0]["dev"]
    assert all(torch.equal(value, uninterrupted[1][name]) for name, value in final_state(tmp_path / "run").items())


def test_a_run_folder_moved_midway_resumes_in_its_new_place_and_once_finished_is_not_run_again(
        tmp_path, tiny, monkeypatch, caplog, uninterrupted):
    """config.json beside the checkpoints and results.json's config hold the folder where the run was launched: moved
    with mv and relaunched into the new place (hydra.run.dir), the run resumes there, with the weights and the best
    epoch of a run never interrupted, and once finished it is recognised as such wherever it is moved."""
    caplog.set_level(logging.INFO, logger="probing")
    interrupted(monkeypatch, "training_step", lambda m: m.global_step == 9)  # step.ckpt after 8 steps, in epoch 1
    with pytest.raises(RuntimeError, match="killed"):
        train.run(compose_job("train", tmp_path / "first", *tiny, *EXACT))
    monkeypatch.undo()
    (tmp_path / "first" / "run").rename(tmp_path / "run")
    results = train.run(compose_job("train", tmp_path, *tiny, *EXACT))
    assert f"resuming from {tmp_path / 'run' / 'checkpoints' / 'step.ckpt'}" in caplog.text
    expected, weights, exported, _ = uninterrupted
    assert results["dev"] == expected["dev"] and results["best_epoch"] == expected["best_epoch"]
    state = final_state(tmp_path / "run")
    assert all(torch.equal(state[name], weights[name]) for name in weights)
    assert (tmp_path / "run" / "model" / "model.safetensors").read_bytes() == exported
    assert results["config"]["paths"]["output_dir"] == str(tmp_path / "run")  # written as resolved, where it ran
    (tmp_path / "again").mkdir()
    (tmp_path / "run").rename(tmp_path / "again" / "run")
    interrupted(monkeypatch, "training_step", lambda m: True)  # a run that trained again would fail
    assert train.run(compose_job("train", tmp_path / "again", *tiny, *EXACT)) == json.loads(json.dumps(results))


class Unsafe:
    """An object that a weights-only load does not unpickle."""


def test_a_checkpoint_holding_other_objects_is_one_error_before_lightning_loads_it(tmp_path, tiny, monkeypatch):
    def crash(module, batch, batch_idx):
        raise RuntimeError("stopped")

    monkeypatch.setattr(FineTuner, "training_step", crash)
    with pytest.raises(RuntimeError):
        train.run(compose_job("train", tmp_path, *tiny, "trainer.max_epochs=1"))
    monkeypatch.undo()
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    torch.save({"state_dict": {}, "epoch": 0, "global_step": 0, "callbacks": {"extra": Unsafe()}}, last)
    record_hash(last)  # its bytes are those recorded: what it holds is refused
    with pytest.raises(CheckpointError) as error:
        train.run(compose_job("train", tmp_path, *tiny, "trainer.max_epochs=1"))
    message = str(error.value)
    assert message == (f"{last} holds objects other than tensors and plain values ({__name__}.Unsafe), which are "
                       "not loaded because unpickling them could run code. Fix: relaunch with finetune.resume=restart "
                       "to train from the start")  # no epoch was validated: there is no best.ckpt to resume from


def test_a_relaunch_refuses_the_results_of_a_base_model_changed_since(tmp_path, tiny_bert_path):
    """The pretrained model's weights replaced after a finished run: a relaunch into its folder would return the
    old model's fine-tuning (and its exported model) as this one's."""
    model = tmp_path / "base"
    shutil.copytree(tiny_bert_path, model)
    cfg = compose_job("train", tmp_path, f"model.name_or_path={model}", "logger=csv", "task.batch_size=64",
                      "trainer.max_epochs=1")
    results = train.run(cfg)
    out = tmp_path / "run" / "results.json"
    assert train.run(cfg) == results
    torch.manual_seed(1)
    BertModel(BertConfig.from_pretrained(model)).save_pretrained(model)
    with pytest.raises(ConfigError) as error:
        train.run(cfg)
    assert f"computed from the model {model} as it was then, and its weights have changed since" in str(error.value)
    assert f"delete the run folder {out.parent}" in str(error.value) and json.loads(out.read_text()) == results
