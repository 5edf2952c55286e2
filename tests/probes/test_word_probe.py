"""Word probes (Hewitt & Liang 2019 §4) and the MDL prefix probes (Voita & Titov 2020 §2.2): batched heads behave like
standalone probes, prefix probes learn only from their prefix, a fit separates task from control, and the online
code of known predictions is the hand-computed one."""

from __future__ import annotations

import math

import lightning
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from probing.errors import ConfigError, ProbingError
from probing.probes.bits.mdl import block_ends
from probing.probes.bits.parts import OnlineCodePart
from probing.probes.bits.prefix_probes import PrefixHead, PrefixProbes
from probing.probes.components import families
from probing.probes.components.batched_probes import BatchedProbes, first_layer_products
from probing.probes.word_probe import WordProbe

FAMILIES = [("linear", None), ("linear", 3), ("mlp1", None), ("mlp2", None)]


def prefix_probes(module) -> PrefixProbes:
    """The MDL prefix probes of a module with the online code."""
    return module.parts[OnlineCodePart.NAME].probes


@pytest.mark.parametrize(("family", "rank"), FAMILIES)
def test_each_head_equals_a_standalone_sequential(family, rank):
    torch.manual_seed(0)
    probes = BatchedProbes(3, 12, 5, families.FACTORIES[family](hidden_dim=16, rank=rank))
    x = torch.randn(7, 12)
    logits = probes(x)
    assert logits.shape == (7, 3, 5)
    for head in range(3):
        torch.testing.assert_close(logits[:, head], probes.as_sequential(head)(x), rtol=1e-5, atol=1e-6)
    # one input per head (per-head scalar mixes) gives each head its own
    per_head = torch.randn(3, 7, 12)
    logits = probes(per_head)
    for head in range(3):
        torch.testing.assert_close(logits[:, head], probes.as_sequential(head)(per_head[head]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("family", "rank"), FAMILIES)
def test_under_bf16_autocast_each_head_computes_and_learns_as_a_standalone_sequential(family, rank):
    """bf16-mixed adds the biases after the product (not as its addend, as in float32): same logits and float32
    gradients as each head's own nn.Sequential under the same autocast, up to bf16 rounding."""
    torch.manual_seed(0)
    probes = BatchedProbes(3, 12, 5, families.FACTORIES[family](hidden_dim=16, rank=rank))
    with torch.no_grad():
        for _, bias in probes.layers():
            # |bias| near 1 and small inputs: no hidden unit near 0, where bf16 rounding may flip its ReLU
            bias.add_(torch.randn_like(bias).sign())
    standalone = [probes.as_sequential(head) for head in range(3)]
    x = 0.1 * torch.randn(7, 12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = probes(x)
        reference = [probe(x) for probe in standalone]
    assert logits.dtype == torch.bfloat16
    logits.float().square().sum().backward()
    for head, (probe, expected) in enumerate(zip(standalone, reference)):
        torch.testing.assert_close(logits[:, head], expected, rtol=2e-2, atol=2e-2)
        expected.float().square().sum().backward()
        linears = [module for module in probe if isinstance(module, nn.Linear)]
        for (weight, bias), linear in zip(probes.layers(), linears):
            assert weight.grad.dtype == bias.grad.dtype == torch.float32
            for batched, alone in ((weight.grad[head], linear.weight.grad), (bias.grad[head], linear.bias.grad)):
                assert (batched - alone).norm() <= 0.02 * alone.norm()


def test_a_bf16_module_computes_as_its_standalone_bf16_sequentials():
    torch.manual_seed(0)
    probes = BatchedProbes(num_heads=2, input_dim=12, num_labels=5, family=families.mlp2(hidden_dim=16))
    with torch.no_grad():
        for _, bias in probes.layers():
            bias.add_(torch.randn_like(bias).sign())
    probes = probes.to(torch.bfloat16)
    x = (0.1 * torch.randn(7, 12)).to(torch.bfloat16)
    logits = probes(x)
    assert logits.dtype == torch.bfloat16
    for head in range(2):
        torch.testing.assert_close(logits[:, head], probes.as_sequential(head)(x), rtol=2e-2, atol=2e-2)


def test_first_layer_products_are_those_of_the_module():
    """The products the benches time as the limit are the module's own: its first layer's output (bias zero) and the
    weight gradient autograd computes for it from a given output gradient."""
    torch.manual_seed(0)
    probes = BatchedProbes(3, 5, 4, families.linear())
    with torch.no_grad():
        probes.b1.zero_()
    x, output_grad = torch.randn(6, 5), torch.randn(3, 4, 6)  # (B, D); (P, K, B), the layout of the products
    logits = probes(x)  # (B, P, K)
    (logits * output_grad.permute(2, 0, 1)).sum().backward()
    forward, weight_grad = first_layer_products(probes.w1.detach(), x, output_grad)
    torch.testing.assert_close(forward, logits.detach().permute(1, 2, 0))
    torch.testing.assert_close(weight_grad, probes.w1.grad)


def test_standalone_layers_of_each_family():
    def kinds(family, rank=None, dropout=0.0):
        probes = BatchedProbes(1, 4, 3, families.FACTORIES[family](hidden_dim=5, rank=rank, dropout=dropout))
        return [type(m) for m in probes.as_sequential(0)]

    assert kinds("linear") == [nn.Linear]
    assert kinds("linear", rank=2, dropout=0.1) == [nn.Dropout, nn.Linear, nn.Linear]
    assert kinds("mlp1", dropout=0.1) == [nn.Linear, nn.ReLU, nn.Dropout, nn.Linear]
    assert kinds("mlp2") == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]


@pytest.mark.parametrize(("family", "rank"), FAMILIES)
def test_initialisation_matches_fresh_linear_layers_per_head(family, rank):
    torch.manual_seed(3)
    probes = BatchedProbes(2, 6, 4, families.FACTORIES[family](hidden_dim=5, rank=rank))
    torch.manual_seed(3)
    sizes = {"linear": [6, 4] if rank is None else [6, rank, 4], "mlp1": [6, 5, 4], "mlp2": [6, 5, 5, 4]}[family]
    for head in range(2):
        reference = [nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
        for (weight, bias), linear in zip(probes.layers(), reference, strict=True):
            torch.testing.assert_close(weight[head], linear.weight, rtol=0, atol=0)
            torch.testing.assert_close(bias[head], linear.bias, rtol=0, atol=0)


def test_rank_constrained_linear_probe_has_rank_at_most_r():
    torch.manual_seed(1)
    probes = BatchedProbes(num_heads=2, input_dim=20, num_labels=10, family=families.linear(rank=3))
    for head in range(2):
        # the affine map x -> logits: its linear part from the identity minus the offset at 0
        linear_part = probes(torch.eye(20))[:, head] - probes(torch.zeros(1, 20))[:, head]
        assert torch.linalg.matrix_rank(linear_part) <= 3
    full = BatchedProbes(num_heads=1, input_dim=20, num_labels=10, family=families.linear())
    assert torch.linalg.matrix_rank(full(torch.eye(20))[:, 0] - full(torch.zeros(1, 20))[:, 0]) == 10


def test_loss_on_one_head_leaves_the_others_without_gradient():
    torch.manual_seed(2)
    probes = BatchedProbes(num_heads=4, input_dim=8, num_labels=3, family=families.mlp2(hidden_dim=6))
    probes(torch.randn(5, 8))[:, 2].sum().backward()
    for name, parameter in probes.named_parameters():
        assert parameter.grad[2].abs().sum() > 0, name
        assert torch.count_nonzero(parameter.grad[[0, 1, 3]]) == 0, name


def test_linear_input_dropout_is_drawn_per_head():
    torch.manual_seed(4)
    probes = BatchedProbes(num_heads=2, input_dim=50, num_labels=3, family=families.linear(dropout=0.5))
    with torch.no_grad():
        probes.w1.copy_(probes.w1[:1].expand_as(probes.w1))
        probes.b1.copy_(probes.b1[:1].expand_as(probes.b1))
    x = torch.randn(4, 50)
    logits = probes(x)
    assert not torch.allclose(logits[:, 0], logits[:, 1])  # same weights, different masks
    probes.eval()
    torch.testing.assert_close(probes(x)[:, 0], probes(x)[:, 1])


@pytest.mark.parametrize(("settings", "key"), [
    ({"family": "mlp3"}, "family='mlp3' is not one of linear, mlp1, mlp2"),
    ({"family": "mlp1", "rank": 4}, "^rank=4"),
    ({"family": "linear", "rank": 0}, "^rank=0"),
    ({"hidden_dim": 0}, "^hidden_dim=0"),
    ({"dropout": 1.0}, "^dropout=1.0"),
])
def test_bad_settings_name_the_argument(settings, key):
    with pytest.raises(ConfigError, match=key):
        families.from_record(settings, default="linear")


@pytest.mark.parametrize("num_layers", [None, 3])
def test_a_rank_above_the_feature_dimension_is_refused(num_layers):
    with pytest.raises(ConfigError) as caught:
        WordProbe.from_settings(input_dim=8, labels=["a", "b"], family="linear", rank=9, num_layers=num_layers)
    assert str(caught.value) == ("family.rank=9 exceeds the feature dimension 8 of this representation; a rank of 8 "
                                 "or more constrains nothing. Fix: family.rank<=8, or family.rank=null")
    probe = WordProbe.from_settings(input_dim=8, labels=["a", "b"], family="linear", rank=8, num_layers=num_layers)
    assert probe.probes.mlps.sizes == [8, 8, 2]


def test_heads_with_a_mix_each_mix_their_own_layers():
    torch.manual_seed(5)
    head = PrefixHead(2, input_dim=6, num_labels=3, family=families.mlp1(hidden_dim=4), num_layers=3)
    with torch.no_grad():
        head.mixes[1].weights.copy_(torch.tensor([5.0, 0.0, -5.0]))
    features = torch.randn(4, 3, 6)
    logits = head(features)
    for h in range(2):
        mixed = head.mixes[h](features.transpose(0, 1))
        torch.testing.assert_close(logits[:, h], head.probes.as_sequential(h)(mixed))
    state = head.state_of_heads()
    with torch.no_grad():
        for p in head.parameters():
            p.add_(1.0)
    head.copy_heads_(state, torch.tensor([False, True]))
    torch.testing.assert_close(head.mixes[1].weights, torch.tensor([5.0, 0.0, -5.0]))
    torch.testing.assert_close(head.probes.w1[1], state["probes.w1"][1])
    torch.testing.assert_close(head.probes.w1[0], state["probes.w1"][0] + 1)


def mdl_batch(n_rows: int = 12, dim: int = 6, labels: int = 3, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {"features": torch.randn(n_rows, dim, generator=generator),
            "label": torch.randint(labels, (n_rows,), generator=generator),
            "control_label": torch.randint(labels, (n_rows,), generator=generator),
            "order": torch.randperm(n_rows, generator=generator)}


def prefix_losses(module: WordProbe, batch: dict) -> torch.Tensor:
    """(prefixes, T): each prefix probe's mean cross-entropy over the batch rows of its prefix, as a training step
    adds them."""
    return prefix_probes(module).losses(batch["features"], module.mdl_targets(batch), batch["order"])


def prefix_gradients(module: WordProbe, batch: dict) -> list[dict[str, torch.Tensor | None]]:
    """Each prefix's gradients (None: the prefix did not run)."""
    module.zero_grad(set_to_none=True)
    loss = prefix_losses(module, batch).sum()
    if loss.requires_grad:  # no row of any prefix: no probe ran
        loss.backward()
    return [{name: p.grad for name, p in head.probes.named_parameters()} for head in prefix_probes(module).heads]


def test_prefix_probe_learns_only_from_its_prefix():
    torch.manual_seed(6)
    ends = [2, 5, 9, 12]
    module = WordProbe.from_settings(input_dim=6, labels=["a", "b", "c"], family="mlp1", hidden_dim=8, control=True,
                                     mdl_block_ends=ends)
    assert [head.num_heads for head in prefix_probes(module).heads] == [2, 2, 2]  # 3 prefixes x (task, control)
    batch = mdl_batch()
    grads = prefix_gradients(module, batch)
    for i, end in enumerate(ends[:-1]):
        rows = batch["order"] < end
        for head, target in ((0, batch["label"]), (1, batch["control_label"])):
            alone = prefix_probes(module).heads[i].probes.as_sequential(head)
            F.cross_entropy(alone(batch["features"][rows]), target[rows]).backward()
            torch.testing.assert_close(grads[i]["w1"][head], alone[0].weight.grad, rtol=1e-5, atol=1e-7)
            torch.testing.assert_close(grads[i]["b2"][head], alone[2].bias.grad, rtol=1e-5, atol=1e-7)
        # rows outside the prefix alone give the prefix probe no gradient: it does not run, so the optimizer
        # skips it
        outside = {key: value[~rows] for key, value in batch.items()}
        assert all(grad is None for grad in prefix_gradients(module, outside)[i].values())


def test_prefix_loss_is_zero_without_rows_of_the_prefix():
    module = WordProbe.from_settings(input_dim=6, labels=["a", "b", "c"], family="linear", mdl_block_ends=[2, 5, 12])
    batch = mdl_batch()
    late = {key: value[batch["order"] >= 2] for key, value in batch.items()}
    losses = prefix_losses(module, late)  # (prefixes, 1)
    assert losses[0, 0] == 0 and losses[1, 0] > 0


def test_kept_prefix_weights_are_those_of_each_heads_best_dev_epoch():
    module = WordProbe.from_settings(input_dim=4, labels=["a", "b"], family="linear", mdl_block_ends=[1, 2, 4])
    prefixes = prefix_probes(module)
    first = prefixes.state_of_heads()
    prefixes._keep_best(torch.tensor([1.0, 1.0]), epoch=0)

    def shift_weights() -> None:
        with torch.no_grad():
            for head in prefixes.heads:
                head.probes.w1.add_(1.0)

    shift_weights()
    prefixes._keep_best(torch.tensor([0.5, 2.0]), epoch=1)  # prefix 0 improved, prefix 1 did not
    shift_weights()
    module.on_fit_end()
    torch.testing.assert_close(prefixes.heads[0].probes.w1, first[0]["probes.w1"] + 1)
    torch.testing.assert_close(prefixes.heads[1].probes.w1, first[1]["probes.w1"])
    assert prefixes.best_epochs() == [[1], [0]]


def test_codelength_of_a_probe_giving_half_to_the_right_label():
    # one-hot features of the label and logits log(K-1) * x: p(right label) = 3 / (3 + 3) = 1/2, one bit per label
    labels, n = 4, 40
    ends = block_ends(n, [0.1, 0.5, 1.0])  # [4, 20, 40]
    module = WordProbe.from_settings(input_dim=labels, labels=list("abcd"), family="linear", control=True,
                                     mdl_block_ends=ends)
    with torch.no_grad():
        for head in prefix_probes(module).heads:  # task and control probe of each prefix
            head.probes.w1.copy_(math.log(labels - 1) * torch.eye(labels).expand(2, -1, -1))
            head.probes.b1.zero_()
    label = torch.arange(n) % labels
    data = [{"features": F.one_hot(y, labels).float(), "label": y, "control_label": y, "order": torch.tensor(i)}
            for i, y in enumerate(label)]
    result = module.codelength(DataLoader(data, batch_size=7, shuffle=True))
    assert result["block_ends"] == [4, 20, 40]
    assert result["block_bits"] == pytest.approx([16.0, 20.0])
    assert result["codelength_bits"] == pytest.approx(4 * 2 + 36)
    assert result["uniform_codelength_bits"] == pytest.approx(80.0)
    assert result["compression"] == pytest.approx(80 / 44)
    assert result["control_codelength_bits"] == pytest.approx(44.0)
    with pytest.raises(ProbingError, match="exactly once"):
        module.codelength(DataLoader(data[:-1], batch_size=7))


def synthetic_words(n_words: int, dim: int, labels: int, seed: int) -> list[dict]:
    """One example per word type: the label is the argmax of the word vector's first `labels` coordinates (a margin
    added), the control label a random label per word."""
    generator = torch.Generator().manual_seed(seed)
    vectors = torch.randn(n_words, dim, generator=generator)
    label = vectors[:, :labels].argmax(dim=1)
    vectors[torch.arange(n_words), label] += 2.0
    control = torch.randint(labels, (n_words,), generator=generator)
    return [{"features": vectors[i], "label": label[i], "control_label": control[i], "order": torch.tensor(i)}
            for i in range(n_words)]


def test_fit_learns_the_task_not_the_control_and_compresses_the_labels():
    lightning.seed_everything(0)
    labels = ["x", "y", "z"]
    train, dev = synthetic_words(300, 10, 3, seed=1), synthetic_words(90, 10, 3, seed=2)
    dev = [{key: value for key, value in row.items() if key != "order"} for row in dev]
    ends = block_ends(len(train))
    module = WordProbe.from_settings(input_dim=10, labels=labels, family="linear", control=True, mdl_block_ends=ends,
                                     optimizer=lambda groups: torch.optim.Adam(groups, lr=0.02))
    trainer = lightning.Trainer(max_epochs=25, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, accelerator="cpu")
    trainer.fit(module, DataLoader(train, batch_size=32, shuffle=True), DataLoader(dev, batch_size=64))
    dev_metrics = module.split_metrics["dev"]
    assert dev_metrics["accuracy"] == 1.0
    assert dev_metrics["macro_f1"] == pytest.approx(1.0)
    assert dev_metrics["per_label_f1"] == {"x": 1.0, "y": 1.0, "z": 1.0}
    assert dev_metrics["n_examples"] == 90
    assert dev_metrics["control_accuracy"] < 0.6  # unseen words: the control labels are a coin toss
    assert dev_metrics["selectivity"] == pytest.approx(1.0 - dev_metrics["control_accuracy"])
    assert trainer.callback_metrics["dev/micro_f1"] == 1.0
    result = module.codelength(DataLoader(train, batch_size=50))
    assert result["codelength_bits"] < 0.5 * result["uniform_codelength_bits"]
    assert result["compression"] > 2
    assert result["control_codelength_bits"] > result["codelength_bits"]
    assert all(epoch >= 0 for epoch in result["prefix_best_epochs"])


def test_training_step_refuses_a_non_finite_loss():
    module = WordProbe.from_settings(input_dim=4, labels=["a", "b"], family="linear")
    batch = {"features": torch.full((2, 4), float("nan")), "label": torch.tensor([0, 1])}
    with pytest.raises(ProbingError, match="training loss"):
        module.training_step(batch, 0)


def test_optimizer_gets_every_probe_and_the_mix_as_its_own_group():
    module = WordProbe.from_settings(input_dim=4, labels=["a", "b"], family="linear", control=True,
                                     mdl_block_ends=[1, 3], num_layers=2, mix={"lr": 0.5},
                                     optimizer=lambda groups: torch.optim.SGD(groups, lr=0.1))
    optimizer = module.configure_optimizers()
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in module.parameters()}
    assert sorted(group["lr"] for group in optimizer.param_groups) == [0.1, 0.1, 0.1, 0.5, 0.5, 0.5]
    assert module(torch.randn(5, 2, 4)).shape == (5, 1, 2)  # one probe of two labels
