"""probing/probes/components/batched_probes.py: C independent probes of one family in one module behave like C
standalone models (here the s-class task's binary MLP-1 probes; the word probes' families in test_word_probe.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from probing.probes.components import BatchedProbes
from probing.probes.components.families import mlp1


def binary_mlps(num_probes: int, input_dim: int, hidden_dim: int, dropout: float = 0.0) -> BatchedProbes:
    """C binary MLP-1 probes (Zhao et al.'s s-class probes) as `BatchedProbes` builds them."""
    return BatchedProbes(num_probes, input_dim, 2, mlp1(hidden_dim=hidden_dim, dropout=dropout))


def test_batched_logits_equal_standalone_probes():
    torch.manual_seed(0)
    probes = binary_mlps(num_probes=5, input_dim=12, hidden_dim=16)
    x = torch.randn(7, 12)
    logits = probes(x)
    assert logits.shape == (7, 5, 2)
    for k in range(5):
        torch.testing.assert_close(logits[:, k], probes.as_sequential(k)(x), rtol=1e-5, atol=1e-6)


def test_initialisation_matches_two_fresh_linear_layers_per_probe():
    torch.manual_seed(3)
    probes = binary_mlps(num_probes=3, input_dim=6, hidden_dim=4)
    torch.manual_seed(3)
    reference = [(nn.Linear(6, 4), nn.Linear(4, 2)) for _ in range(3)]
    for k, (first, second) in enumerate(reference):
        torch.testing.assert_close(probes.w1[k], first.weight, rtol=0, atol=0)
        torch.testing.assert_close(probes.b1[k], first.bias, rtol=0, atol=0)
        torch.testing.assert_close(probes.w2[k], second.weight, rtol=0, atol=0)
        torch.testing.assert_close(probes.b2[k], second.bias, rtol=0, atol=0)
    # kaiming-uniform(a=sqrt(5)) and the bias init are both bounded by 1/sqrt(fan_in)
    assert probes.w1.abs().max() <= 1 / 6**0.5 and probes.w2.abs().max() <= 1 / 4**0.5


def test_loss_on_one_probe_leaves_other_probes_without_gradient():
    torch.manual_seed(1)
    probes = binary_mlps(num_probes=4, input_dim=8, hidden_dim=10)
    probes(torch.randn(6, 8))[:, 2].sum().backward()
    for name in ("w1", "b1", "w2", "b2"):
        grad = getattr(probes, name).grad
        assert grad[2].abs().sum() > 0, name
        assert torch.count_nonzero(grad[[0, 1, 3]]) == 0, name


def test_parameter_count_matches_zhao_appendix_a2():
    with torch.device("meta"):
        probes = binary_mlps(num_probes=34, input_dim=768, hidden_dim=1024)
    assert sum(p.numel() for p in probes.parameters()) == 26_843_204


def test_dropout_probe_as_sequential_includes_dropout_and_matches_in_eval():
    torch.manual_seed(2)
    probes = binary_mlps(num_probes=2, input_dim=5, hidden_dim=8, dropout=0.3).eval()
    standalone = probes.as_sequential(1).eval()
    assert [type(m) for m in standalone] == [nn.Linear, nn.ReLU, nn.Dropout, nn.Linear]
    x = torch.randn(3, 5)
    torch.testing.assert_close(probes(x)[:, 1], standalone(x))


def test_wrong_feature_size_is_rejected():
    probes = binary_mlps(num_probes=2, input_dim=5, hidden_dim=3)
    with pytest.raises(ValueError, match=r"\(batch, 5\)"):
        probes(torch.randn(3, 4))


def test_one_batched_step_gives_every_probe_its_standalone_gradients():
    torch.manual_seed(4)
    probes = binary_mlps(num_probes=3, input_dim=6, hidden_dim=5)
    standalone = [probes.as_sequential(k) for k in range(3)]
    x, labels = torch.randn(8, 6), torch.tensor([0, 1, 2, 0, 1, 2, 0, 0])
    targets = (labels[:, None] == torch.arange(3)).long()
    per_context = nn.functional.cross_entropy(probes(x).flatten(0, 1), targets.flatten(), reduction="none")
    per_context.view_as(targets).mean(dim=0).sum().backward()
    for k, probe in enumerate(standalone):
        nn.functional.cross_entropy(probe(x), targets[:, k]).backward()
        torch.testing.assert_close(probes.w1.grad[k], probe[0].weight.grad)
        torch.testing.assert_close(probes.b1.grad[k], probe[0].bias.grad)
        torch.testing.assert_close(probes.w2.grad[k], probe[2].weight.grad)
        torch.testing.assert_close(probes.b2.grad[k], probe[2].bias.grad)


def test_input_gradient_is_the_sum_over_probes():
    """A learned input (the scalar mix) gets the gradients of all C probes, summed."""
    torch.manual_seed(5)
    probes = binary_mlps(num_probes=4, input_dim=3, hidden_dim=7)
    x = torch.randn(5, 3, requires_grad=True)
    probes(x)[..., 1].sum().backward()
    expected = torch.zeros(5, 3)
    for k in range(4):
        x_k = x.detach().clone().requires_grad_()
        probes.as_sequential(k)(x_k)[:, 1].sum().backward()
        expected += x_k.grad
    torch.testing.assert_close(x.grad, expected)


def test_every_gradient_comes_out_contiguous_in_its_parameters_shape():
    """Fused Adam copies strided tensors: the products' layout must hand every gradient over as it is stored."""
    torch.manual_seed(7)
    probes = binary_mlps(num_probes=3, input_dim=6, hidden_dim=5)
    probes(torch.randn(4, 6))[..., 1].sum().backward()
    for name, parameter in probes.named_parameters():
        assert parameter.grad.shape == parameter.shape and parameter.grad.is_contiguous(), name


def per_probe_reference(x, w1, b1, w2, b2):
    """The probes as C separate products over the probe axis (input-major weights (C, D, H), (C, H, 2))."""
    hidden = torch.relu(torch.baddbmm(b1[:, None, :], x.expand(len(w1), *x.shape), w1))
    return torch.baddbmm(b2[:, None, :], hidden, w2).transpose(0, 1)


def test_a_training_step_equals_the_per_probe_model_with_plain_adam():
    """One step of the module (products over the probe axis with the examples as columns, fused Adam) moves every
    weight as C separate per-probe products with the examples as rows followed by the textbook Adam loop do."""
    torch.manual_seed(6)
    probes = binary_mlps(num_probes=4, input_dim=10, hidden_dim=12)
    reference = [nn.Parameter(tensor.detach().clone()) for tensor in
                 (probes.w1.transpose(1, 2), probes.b1, probes.w2.transpose(1, 2), probes.b2)]
    x, targets = torch.randn(9, 10), torch.randint(0, 2, (9, 4))
    for model_logits, parameters, fused in ((lambda: probes(x), list(probes.parameters()), True),
                                            (lambda: per_probe_reference(x, *reference), reference, False)):
        optimizer = torch.optim.Adam(parameters, lr=1e-2, fused=fused, foreach=False if not fused else None)
        for _ in range(2):
            optimizer.zero_grad()
            per_example = nn.functional.cross_entropy(model_logits().flatten(0, 1), targets.flatten(),
                                                      reduction="none")
            per_example.view_as(targets).mean(dim=0).sum().backward()
            optimizer.step()
    w1, b1, w2, b2 = reference
    torch.testing.assert_close(probes.w1, w1.transpose(1, 2), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(probes.b1, b1, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(probes.w2, w2.transpose(1, 2), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(probes.b2, b2, rtol=1e-5, atol=1e-6)
