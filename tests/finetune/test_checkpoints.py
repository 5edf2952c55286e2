"""Checkpoint files checked against the hash recorded when they were written, and random states carried over."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from probing.errors import CheckpointError
from probing.finetune.checkpoints import RandomStates, hash_file, read_checkpoint, record_hash


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
    with pytest.raises(CheckpointError, match=f"{checkpoint} is damaged.*Fix: relaunch with finetune.resume=restart"):
        read_checkpoint(checkpoint)


def test_a_truncated_checkpoint_is_one_error_naming_it(checkpoint):
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=f"{checkpoint} is damaged") as error:
        read_checkpoint(checkpoint, fix="do this")
    assert str(error.value).endswith("Fix: do this") and "\n" not in str(error.value)


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
