"""probing/probes/trees/probe.py and structural.py: the structural probes of Hewitt & Manning (2019): B's
squared distances and norms against the explicit formula, the reference's L1 loss by hand, the refusals of what a
structural probe does not honour, and a fit that learns a tree."""

from __future__ import annotations

from functools import partial

import lightning
import pytest
import torch
from torch.utils.data import DataLoader

from probing.errors import ConfigError
from probing.probes.trees.probe import TreeProbe, tree_loss
from probing.probes.trees.structural import StructuralHead


def test_the_distance_head_gives_the_squared_distances_after_projection():
    torch.manual_seed(0)
    head = StructuralHead(input_dim=5, rank=3, kind="distance")
    features = torch.randn(2, 4, 5)
    projected = features @ head.proj
    explicit = (projected[:, :, None, :] - projected[:, None, :, :]).pow(2).sum(-1)  # the reference's (T, T, r) way
    torch.testing.assert_close(head(features), explicit, rtol=1e-5, atol=1e-5)
    assert torch.all(head(features).diagonal(dim1=1, dim2=2) == 0)


def test_the_depth_head_gives_the_squared_norms_and_starts_where_the_reference_starts():
    torch.manual_seed(1)
    head = StructuralHead(input_dim=6, rank=2, kind="depth")
    assert head.proj.abs().max() <= 0.05 and head.rank == 2
    features = torch.randn(3, 4, 6)
    torch.testing.assert_close(head(features), (features @ head.proj).pow(2).sum(-1))


def test_a_mixed_head_mixes_the_layers_first():
    head = StructuralHead(input_dim=2, rank=2, kind="depth", num_layers=2, mix={"initial_weights": [0.0, 0.0]})
    with torch.no_grad():
        head.proj.copy_(torch.eye(2))
    layers = torch.tensor([[[[2.0, 0.0], [0.0, 4.0]]]])  # (B=1, T=1, layers=2, D=2): mean (1, 2)
    torch.testing.assert_close(head(layers), torch.tensor([[5.0]]))  # 1 + 4


def test_the_loss_is_the_references_l1_normalised_by_squared_lengths():
    predictions = torch.tensor([[[0.0, 2.0, 9.0], [2.0, 0.0, 9.0], [9.0, 9.0, 9.0]],
                                [[0.0, 1.0, 3.0], [1.0, 0.0, 1.0], [3.0, 1.0, 0.0]]])
    gold = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
                         [[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 1.0, 0.0]]])
    lengths = torch.tensor([2, 3])  # the 9s of sentence 0 are padding
    # sentence 0: |2-1| twice / 2^2 = 0.5; sentence 1: |3-2| twice / 3^2 = 2/9; mean over the two sentences
    assert float(tree_loss(predictions, gold, lengths)) == pytest.approx((0.5 + 2 / 9) / 2)
    depths = tree_loss(torch.tensor([[1.0, 3.0, 7.0]]), torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([2]))
    assert float(depths) == pytest.approx((1 + 2) / 2)


@pytest.mark.parametrize("settings,message", [
    ({"family": "mlp1"}, "the probe family mlp1: a structural probe is a linear map B"),
    ({"family": "linear", "dropout": 0.1}, "^family.dropout=0.1"),
    ({"family": "linear", "rank": 0}, r"^rank=0 is not an integer >= 1"),
    ({"family": "linear", "rank": "abc"}, r"^rank='abc' is not an integer >= 1"),
    ({"family": "linear", "rank": 5}, r"^family\.rank=5 exceeds the feature dimension 4"),
    ({"family": "linear", "optimizer": partial(torch.optim.Adam, lr=-1)}, r"^optimizer\.lr=-1 is not"),
])
def test_what_a_structural_probe_does_not_honour_is_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        TreeProbe.from_settings("distance", input_dim=4, **settings)


def test_a_tree_probe_carries_no_part_of_a_classifier():
    """No labels, online code or conditioning: a tree probe is not built with them, and measures no bits."""
    for part in ({"labels": ["a"]}, {"mdl_block_ends": [2, 4]}, {"conditioning_dim": 2}):
        with pytest.raises(TypeError):
            TreeProbe.from_settings("distance", input_dim=4, **part)
    probe = TreeProbe.from_settings("distance", input_dim=4)
    assert not probe.MEASURES_BITS and not len(probe.parts) and not hasattr(probe, "bits")


def test_full_rank_by_default_and_probe_rank_otherwise():
    assert TreeProbe.from_settings("distance", input_dim=8, family="linear").probes.rank == 8
    assert TreeProbe.from_settings("depth", input_dim=8, family="linear", rank=3).probes.rank == 3


def chain_batches(n_sentences: int, length: int, dim: int, seed: int) -> list[dict]:
    """Sentences whose word vectors encode their position on a line: a right-branching chain's distances are
    |i - j|, which a rank-1 B can reproduce exactly."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_sentences):
        positions = torch.arange(length, dtype=torch.float32)
        features = torch.randn(1, length, dim, generator=generator) * 0.1
        features[0, :, 0] = positions
        gold = (positions[:, None] - positions[None, :]).abs()[None]
        batches.append({"features": features, "gold": gold, "lengths": torch.tensor([length]),
                        "punctuation": torch.zeros(1, length, dtype=torch.bool)})
    return batches


def test_a_fit_learns_the_distances_of_a_chain(tmp_path):
    torch.manual_seed(3)
    module = TreeProbe.from_settings("distance", input_dim=4, family="linear", rank=2,
                                     optimizer=lambda groups: torch.optim.Adam(groups, lr=0.05))
    train, dev = chain_batches(8, 6, 4, seed=0), chain_batches(4, 6, 4, seed=1)
    trainer = lightning.Trainer(max_epochs=30, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, DataLoader(train, batch_size=None), DataLoader(dev, batch_size=None))
    assert "dev/loss" in trainer.callback_metrics  # what the LR schedule, early stopping and keep_best read
    trainer.test(module, DataLoader(dev, batch_size=None), verbose=False)
    assert module.split_metrics["test"]["uuas"] == 1.0  # every chain edge found
    assert module.split_metrics["test"]["dspr"] > 0.95
