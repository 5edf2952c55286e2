"""Checkpoint files checked against the hash recorded when they were written, and random states carried over."""

from __future__ import annotations

import json
import os
import random

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import OmegaConf

from probing.errors import CheckpointError, ConfigError
from probing.finetune.checkpoints import (
    CHECKPOINT_CONFIG,
    HashedCheckpoint,
    RandomStates,
    ResumePolicy,
    hash_file,
    load_best_weights,
    read_checkpoint,
    record_hash,
    run_identity,
)


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"weight": torch.arange(4096.0)}, "epoch": 1}, path)
    record_hash(path)
    return path


def test_a_checkpoint_reads_back_when_its_bytes_are_those_recorded(checkpoint):
    assert hash_file(checkpoint).read_text().endswith("  last.ckpt\n")  # sha256sum's format: `sha256sum -c` checks it
    assert torch.equal(read_checkpoint(checkpoint)["state_dict"]["weight"], torch.arange(4096.0))


def test_random_bytes_inside_a_checkpoint_are_detected(checkpoint):
    data = bytearray(checkpoint.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the tensor's data: torch.load alone would read a different weight
    checkpoint.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{checkpoint} is damaged.*Fix: relaunch with resume=restart"):
        read_checkpoint(checkpoint)


def test_a_truncated_checkpoint_is_one_error_naming_it(checkpoint):
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=f"{checkpoint} is damaged") as error:
        read_checkpoint(checkpoint, fix="do this")
    assert str(error.value).endswith("Fix: do this") and "\n" not in str(error.value)


class Unsafe:
    """An object that a weights-only load does not unpickle (its class would be imported and called)."""


def test_a_checkpoint_holding_other_objects_than_tensors_is_refused_without_advising_an_unsafe_load(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"weight": torch.ones(2)}, "epoch": 1, "extra": Unsafe()}, path)
    record_hash(path)  # its bytes are those recorded: the payload itself is what is refused
    with pytest.raises(CheckpointError) as error:
        read_checkpoint(path, fix="do this")
    assert str(error.value) == (f"{path} holds objects other than tensors and plain values "
                                f"({__name__}.Unsafe), which are not loaded because unpickling them could run code. "
                                "Fix: do this")


def test_a_checkpoint_without_its_hash_is_refused(checkpoint):
    hash_file(checkpoint).unlink()
    with pytest.raises(CheckpointError, match="has no recorded hash"):
        read_checkpoint(checkpoint)


def test_random_states_come_back_through_a_checkpoint(tmp_path):
    callback = RandomStates()
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    path = tmp_path / "states.pt"
    torch.save(callback.state_dict(), path)
    expected = torch.rand(3), np.random.rand(3), random.random()
    torch.manual_seed(2), np.random.seed(2), random.seed(2)
    callback.load_state_dict(torch.load(path, weights_only=True))  # as Lightning loads a checkpoint here
    assert torch.rand(1).item() not in expected[0].tolist()  # nothing is restored before training starts
    callback.on_train_start(None, None)
    assert torch.equal(torch.rand(3), expected[0]) and np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]


CONFIG = {"seed": 0, "finetune": {"attention_window": None}}


def saved(folder, *names: str, config=CONFIG) -> None:
    """Checkpoints as an interrupted run leaves them: each with its hash, the folder's configuration beside them;
    each newer than the one before."""
    folder.mkdir(parents=True, exist_ok=True)
    for age, name in enumerate(names):
        path = folder / name
        torch.save({"state_dict": {}, "epoch": 0}, path)
        record_hash(path)
        os.utime(path, ns=(age * 10**9, age * 10**9))
    (folder / CHECKPOINT_CONFIG).write_text(json.dumps(config))


def test_an_unknown_resume_policy_is_refused():
    with pytest.raises(ConfigError, match="^resume='sometimes' is not a way to resume. Fix: resume=auto"):
        ResumePolicy("sometimes")
    with pytest.raises(ConfigError, match="^finetune.resume='sometimes' is not a way to resume. Fix: finetune.resume="):
        ResumePolicy("sometimes", name="finetune.resume")


@pytest.mark.parametrize("names,policy,chosen", [
    (("best.ckpt", "last.ckpt", "step.ckpt"), "auto", "step.ckpt"),
    (("best.ckpt", "step.ckpt", "last.ckpt"), "auto", "last.ckpt"),
    (("best.ckpt", "last.ckpt", "step.ckpt"), "best", "best.ckpt"),
    (("best.ckpt", "last.ckpt", "step.ckpt"), "restart", None),
    ((), "auto", None),
])
def test_the_policy_chooses_the_checkpoint_to_resume_from(tmp_path, names, policy, chosen):
    folder = tmp_path / "checkpoints"
    saved(folder, *names)
    expected = None if chosen is None else str(folder / chosen)
    assert ResumePolicy(policy).checkpoint(str(folder), CONFIG, is_rank_zero=True) == expected
    assert json.loads((folder / CHECKPOINT_CONFIG).read_text()) == CONFIG


def test_a_restart_deletes_the_checkpoints_and_their_hashes(tmp_path):
    folder = tmp_path / "checkpoints"
    saved(folder, "best.ckpt", "last.ckpt", "step.ckpt")
    ResumePolicy("restart").checkpoint(str(folder), CONFIG, is_rank_zero=True)
    assert sorted(path.name for path in folder.iterdir()) == [CHECKPOINT_CONFIG]


def test_a_new_run_is_not_warned_of_its_own_configuration_record(tmp_path, recwarn):
    """The folder holds config.json before the first checkpoint: Lightning's 'not empty' warning would alarm."""
    folder = tmp_path / "checkpoints"
    ResumePolicy("auto").checkpoint(str(folder), CONFIG, is_rank_zero=True)
    trainer = L.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    HashedCheckpoint(dirpath=folder).setup(trainer, None, "fit")
    assert not [warning for warning in recwarn if "not empty" in str(warning.message)]
    with pytest.warns(UserWarning, match="exists and is not empty"):  # what it would say otherwise
        ModelCheckpoint(dirpath=folder).setup(trainer, None, "fit")


def test_resuming_from_best_without_a_best_checkpoint_is_refused(tmp_path):
    saved(tmp_path, "last.ckpt")
    with pytest.raises(ConfigError, match="^resume=best, but .* holds no best.ckpt"):
        ResumePolicy("best").checkpoint(str(tmp_path), CONFIG, is_rank_zero=True)


def test_the_checkpoints_of_another_configuration_are_refused_and_kept(tmp_path):
    saved(tmp_path, "last.ckpt", config={"seed": 1})
    before = (tmp_path / "last.ckpt").read_bytes()
    with pytest.raises(ConfigError, match="checkpoints of a run of another configuration"):
        ResumePolicy("restart").checkpoint(str(tmp_path), CONFIG, is_rank_zero=True)
    assert (tmp_path / "last.ckpt").read_bytes() == before
    assert json.loads((tmp_path / CHECKPOINT_CONFIG).read_text()) == {"seed": 1}


def test_the_checkpoints_of_a_moved_run_folder_are_resumed(tmp_path):
    """config.json records the folder where the run was launched; moved with mv, the run resumes in its new place
    (and config.json then records the new one)."""
    def config(run_dir):
        return {**CONFIG, "paths": {"output_dir": str(run_dir)}, "callbacks": {"dirpath": f"{run_dir}/checkpoints"}}

    moved = tmp_path / "moved" / "checkpoints"
    saved(moved, "last.ckpt", config=config(tmp_path / "run"))
    assert ResumePolicy("auto").checkpoint(str(moved), config(moved.parent), is_rank_zero=True) == \
        str(moved / "last.ckpt")
    assert json.loads((moved / CHECKPOINT_CONFIG).read_text()) == config(moved.parent)
    with pytest.raises(ConfigError, match="checkpoints of a run of another configuration"):
        ResumePolicy("auto").checkpoint(str(moved), {**config(moved.parent), "seed": 1}, is_rank_zero=True)


def test_a_moved_checkpoint_folder_keeps_the_best_checkpoint_and_its_score(tmp_path):
    """Lightning forgets the best score (and keeps the old path) when the folder differs from the checkpoint's: the
    paths are moved along instead."""
    old, new = tmp_path / "run" / "checkpoints", tmp_path / "moved" / "checkpoints"
    state = {"monitor": "dev/accuracy", "best_model_score": torch.tensor(0.75), "best_model_path": f"{old}/best.ckpt",
             "current_score": torch.tensor(0.5), "dirpath": str(old), "best_k_models": {f"{old}/best.ckpt": 0.75},
             "kth_best_model_path": f"{old}/best.ckpt", "kth_value": torch.tensor(0.75),
             "last_model_path": f"{old}/last.ckpt"}
    callback = HashedCheckpoint(dirpath=new, monitor="dev/accuracy", mode="max")
    callback.load_state_dict(state)
    assert callback.best_model_path == callback.kth_best_model_path == f"{new}/best.ckpt"
    assert callback.best_model_score == 0.75 and callback.best_k_models == {f"{new}/best.ckpt": 0.75}
    assert callback.last_model_path == f"{new}/last.ckpt"


def test_a_checkpoint_holding_other_objects_is_refused_before_it_is_resumed(tmp_path):
    saved(tmp_path, "best.ckpt", "last.ckpt")
    torch.save({"state_dict": {}, "epoch": 0, "loops": Unsafe()}, tmp_path / "last.ckpt")
    record_hash(tmp_path / "last.ckpt")
    with pytest.raises(CheckpointError) as error:
        ResumePolicy("auto", name="finetune.resume").checkpoint(str(tmp_path), CONFIG, is_rank_zero=True)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'last.ckpt'} holds objects other than tensors and plain values")
    assert "finetune.resume=best" in message and "finetune.resume=restart" in message
    assert "weights_only" not in message and "\n" not in message


def test_a_damaged_newest_checkpoint_names_the_ways_to_go_on(tmp_path):
    saved(tmp_path, "best.ckpt", "last.ckpt")
    (tmp_path / "last.ckpt").write_bytes(b"half a checkpoint")
    with pytest.raises(CheckpointError, match="is damaged") as error:
        ResumePolicy("auto").checkpoint(str(tmp_path), CONFIG, is_rank_zero=True)
    assert " resume=best" in str(error.value) and " resume=restart" in str(error.value)


def test_how_a_run_goes_on_is_not_part_of_what_it_is():
    cfg = OmegaConf.create({"seed": 0, "finetune": {"resume": "best", "isotropy_reg": 0.1}})
    assert OmegaConf.to_container(run_identity(cfg)) == {"seed": 0, "finetune": {"isotropy_reg": 0.1}}
    assert cfg.finetune.resume == "best"  # the job's own config keeps it


def test_a_run_without_a_best_checkpoint_names_the_monitored_metric():
    with pytest.raises(ConfigError, match=r"callbacks.best monitors dev/accuracy\). Fix: task.monitor"):
        load_best_weights(torch.nn.Linear(1, 1), ModelCheckpoint(monitor="dev/accuracy"))
