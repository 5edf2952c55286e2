"""probing/probes/neurons/rankings.py and the probes of the neuron analysis (probing/probes/neurons/probes.py, the
input masks of BatchedProbes): the probeless score against its closed form, NeuroX's weight-mass rule on weights set
by hand, ablation that touches only the ablated neurons, masked batched probes that are the probes trained alone on
their columns, and a planted single-neuron feature that every ranking puts first and the 1-sparse probe finds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from torch import nn
from torch.nn import functional as F

from probing.errors import ConfigError
from probing.probes.components.batched_probes import BatchedProbes
from probing.probes.components.families import FACTORIES, linear, mlp1
from probing.probes.datamodule import ProbingDataModule, TensorSplit
from probing.probes.neurons import rankings as neurons
from probing.probes.neurons.analysis import majority
from probing.probes.neurons.probes import NeuronProbes, accuracies, fit, head_losses


def test_the_probeless_score_is_the_sum_over_label_pairs_of_absolute_mean_differences():
    rng = np.random.default_rng(0)
    features = torch.from_numpy(rng.normal(size=(40, 6)))
    labels = torch.from_numpy(rng.choice([0, 1, 3], size=40))  # label 2 has no example
    means = neurons.class_means(features, labels, 4)
    for c in (0, 1, 3):
        np.testing.assert_allclose(means[c], features[labels == c].mean(dim=0).numpy(), rtol=0, atol=1e-12)
    assert np.isnan(means[2]).all()
    expected = sum(np.abs(means[a] - means[b]) for a, b in itertools.combinations((0, 1, 3), 2))
    np.testing.assert_allclose(neurons.probeless_scores(means), expected, rtol=0, atol=1e-12)
    per_label = neurons.label_mean_differences(means)
    for c in (0, 1, 3):
        np.testing.assert_allclose(per_label[c], sum(np.abs(means[c] - means[o]) for o in (0, 1, 3)), atol=1e-12)
    assert np.isnan(per_label[2]).all()
    assert neurons.ProbelessRanking().order(neurons.Evidence(np.zeros((4, 6)), means)).tolist() == \
        np.argsort(-expected, kind="stable").tolist()


def test_neurox_mass_rule_on_weights_set_by_hand():
    weights = np.array([0.1, 0.5, 0.0, 0.3, 0.1])  # total 1.0; largest first: 1, 3, then 0 and 4 (ties by index)
    assert neurons.label_top_neurons(weights, 0.0).tolist() == [1]
    assert neurons.label_top_neurons(weights, 0.5).tolist() == [1]
    assert neurons.label_top_neurons(weights, 0.6).tolist() == [1, 3]
    assert neurons.label_top_neurons(weights, 0.8).tolist() == [1, 3]
    assert neurons.label_top_neurons(weights, 0.85).tolist() == [1, 3, 0]
    assert neurons.label_top_neurons(weights, 1.0).tolist() == [1, 3, 0, 4]
    # Two labels, steps of 1/4 of the mass. Label 0: masses (.6, .3, .1, 0, 0); label 1: (0, 0, .2, .7, .1).
    # share 0: {0} and {3} -> 0, 3 (by largest share: .7 > .6); 1/4: same; 1/2: same;
    # 3/4: {0, 1} and {3, 2} -> new 1 (.3), 2 (.2); 1: {0, 1, 2} and {3, 2, 4} -> new 4; neuron 5 never (all 0).
    abs_weights = np.array([[6.0, 3.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 7.0, 1.0, 0.0]])
    assert neurons.weight_mass_order(abs_weights, steps=4).tolist() == [3, 0, 1, 2, 4, 5]
    ranking = neurons.ProbeWeightRanking(steps=4)
    evidence = neurons.Evidence(-abs_weights, np.zeros((2, 6)))  # the sign of a weight does not matter
    assert ranking.order(evidence).tolist() == [3, 0, 1, 2, 4, 5]
    np.testing.assert_array_equal(ranking.label_scores(evidence), abs_weights)


def test_the_random_ranking_is_a_seeded_permutation():
    evidence = neurons.Evidence(np.zeros((2, 50)), np.zeros((2, 50)))
    first, again = neurons.RandomRanking(3).order(evidence), neurons.RandomRanking(3).order(evidence)
    assert sorted(first.tolist()) == list(range(50)) and first.tolist() == again.tolist()
    assert first.tolist() != neurons.RandomRanking(4).order(evidence).tolist()
    assert neurons.RandomRanking(3).label_scores(evidence) is None


@pytest.mark.parametrize("fill", ["zero", "mean"])
def test_ablation_changes_only_the_ablated_neurons(fill):
    features = torch.randn(9, 7)
    means = torch.arange(7.0)
    out = neurons.ablated(features, np.array([5, 1]), fill, means)
    kept = [0, 2, 3, 4, 6]
    assert torch.equal(out[:, kept], features[:, kept])
    expected = torch.zeros(9, 2) if fill == "zero" else means[[5, 1]].expand(9, 2)
    assert torch.equal(out[:, [5, 1]], expected)
    assert not torch.equal(out, features)
    with pytest.raises(ConfigError, match="analysis.ablation"):
        neurons.ablated(features, [1], "noise", means)


def test_k_values_double_up_to_the_layer_width():
    assert neurons.k_values(384) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 384]
    assert neurons.k_values(8) == [1, 2, 4, 8] and neurons.k_values(1) == [1]
    masks = neurons.selection_masks([np.array([2, 0, 1]), np.array([1, 2, 0])], [1, 3], 3)
    assert masks.tolist() == [[False, False, True], [True, True, True], [False, True, False], [True, True, True]]


def test_a_masked_head_is_initialised_as_a_fresh_probe_on_its_columns():
    mask = torch.tensor([[False, True, False, True], [True, True, True, True]])
    torch.manual_seed(5)
    probes = BatchedProbes(2, 4, 3, mlp1(hidden_dim=5), input_mask=mask)
    torch.manual_seed(5)
    first, second = nn.Linear(2, 5), nn.Linear(5, 3)
    assert torch.equal(probes.w1[0][:, [1, 3]], first.weight) and torch.equal(probes.b1[0], first.bias)
    assert torch.equal(probes.w1[0][:, [0, 2]], torch.zeros(5, 2))
    assert torch.equal(probes.w2[0], second.weight)


def test_masked_inputs_have_no_influence_and_get_no_gradient():
    mask = torch.tensor([[True, False, True], [False, True, False]])
    probes = BatchedProbes(2, 3, 4, linear(), input_mask=mask)
    x = torch.randn(5, 3)
    changed = x.clone()
    changed[:, 1] += 10.0
    assert torch.equal(probes(x)[:, 0], probes(changed)[:, 0])
    probes(x).sum().backward()
    assert torch.count_nonzero(probes.w1.grad[0][:, 1]) == 0 and torch.count_nonzero(probes.w1.grad[1][:, [0, 2]]) == 0
    assert probes.w1.grad[0][:, [0, 2]].abs().sum() > 0


@pytest.mark.parametrize("family", ["linear", "mlp1"])
def test_batched_masked_probes_train_as_probes_trained_one_by_one_on_their_columns(family):
    torch.manual_seed(0)
    columns = [[3], [0, 5], [1, 2, 4, 6]]
    mask = torch.zeros(3, 7, dtype=torch.bool)
    for head, kept in enumerate(columns):
        mask[head, kept] = True
    batched = BatchedProbes(3, 7, 4, FACTORIES[family](hidden_dim=6, l1=1e-2, l2=1e-2), input_mask=mask)
    alone = [batched.as_sequential(head, kept_inputs=True) for head in range(3)]
    x, y = torch.randn(64, 7), torch.randint(0, 4, (64,))
    optimizers = [torch.optim.Adam(batched.parameters(), lr=1e-2)] + [torch.optim.Adam(p.parameters(), lr=1e-2)
                                                                      for p in alone]
    for rows in torch.arange(64).split(16):
        for optimizer in optimizers:
            optimizer.zero_grad()
        (head_losses(batched(x[rows]), y[rows]).sum() + batched.penalty()).backward()
        for probe, kept in zip(alone, columns):
            (F.cross_entropy(probe(x[rows][:, kept]), y[rows]) + elastic_net(probe, 1e-2, 1e-2)).backward()
        for optimizer in optimizers:
            optimizer.step()
    logits = batched(x)
    for head, (probe, kept) in enumerate(zip(alone, columns)):
        torch.testing.assert_close(logits[:, head], probe(x[:, kept]), rtol=0, atol=1e-6)


def elastic_net(probe: nn.Sequential, l1: float, l2: float) -> torch.Tensor:
    """NeuroX's penalty summed over the probe's weight matrices."""
    return sum(l1 * layer.weight.abs().sum() + l2 * layer.weight.pow(2).sum().sqrt()
               for layer in probe if isinstance(layer, nn.Linear))


def synthetic_splits(rows: int = 300, width: int = 12, planted: int = 7, seed: int = 0) -> dict[str, TensorSplit]:
    """Three labels told apart by neuron `planted` alone (means -3, 0, 3, unit noise), noise everywhere else."""
    generator = torch.Generator().manual_seed(seed)
    splits = {}
    for name in ("train", "dev", "test"):
        labels = torch.randint(0, 3, (rows,), generator=generator)
        features = torch.randn(rows, width, generator=generator)
        features[:, planted] += 3.0 * (labels - 1).float()
        splits[name] = TensorSplit({"features": features, "label": labels})
    return splits


def test_a_planted_neuron_is_ranked_first_by_every_method_and_found_by_the_1_sparse_probe():
    torch.manual_seed(0)
    splits = synthetic_splits()
    probe = BatchedProbes(1, 12, 3, linear(l1=1e-3, l2=1e-3))
    fit(NeuronProbes({"probe": probe}, lr=3e-2), ProbingDataModule(splits, batch_size=50), 10, torch.device("cpu"))
    test = splits["test"].tensors
    assert accuracies(probe, test["features"], test["label"])[0] > 0.8
    train = splits["train"].tensors
    evidence = neurons.Evidence(probe.w1[0].detach().double().numpy(),
                                neurons.class_means(train["features"], train["label"], 3))
    for ranking in (neurons.ProbeWeightRanking(), neurons.ProbelessRanking()):
        assert ranking.order(evidence)[0] == 7, type(ranking).__name__
    label_orders = {str(c): neurons.descending(neurons.label_mean_differences(evidence.class_means)[c])
                    for c in range(3)}
    data = neurons.SparseData({name: split.tensors["features"] for name, split in splits.items()},
                              {str(c): tuple(splits[name].tensors["label"] == c for name in ("train", "dev", "test"))
                               for c in range(3)})
    sparse = neurons.sparse_probes(data, label_orders, ks=[1, 2], candidates=12)
    for label in ("0", "2"):  # the outer labels: one threshold on neuron 7
        assert sparse[label]["best_neuron"] == 7 and sparse[label]["neurons"][0] == [7]
        assert sparse[label]["f1"][0] > 0.8


def test_the_logistic_fit_is_sklearns_with_the_same_ridge():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 3))
    y = (x @ np.array([1.5, -2.0, 0.0]) + 0.3 + rng.normal(size=300)) > 0
    ridge = 1e-2
    w = neurons.fit_logistic(torch.from_numpy(x)[None], torch.from_numpy(y), ridge=ridge)[0].numpy()
    # sklearn minimises C * sum(log-loss) + |w|^2 / 2: the same optimum as mean log-loss + ridge / 2 |w|^2 at
    # C = 1 / (ridge * N)
    reference = LogisticRegression(C=1 / (ridge * len(y)), tol=1e-10, max_iter=1000).fit(x, y)
    np.testing.assert_allclose(w[:-1], reference.coef_[0], atol=1e-5)
    np.testing.assert_allclose(w[-1], reference.intercept_[0], atol=1e-5)


def test_f1_of_the_positive_class():
    predicted = torch.tensor([True, True, False, False])
    gold = torch.tensor([True, False, True, False])
    assert neurons.f1_score(predicted, gold) == pytest.approx(0.5)
    assert neurons.f1_score(torch.zeros(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool)) == 0.0


def fitted_probe(epochs: int, lr: float = 3e-2, **stopping) -> tuple[BatchedProbes, NeuronProbes]:
    """The planted-neuron probe of synthetic_splits fitted from seed 0 for at most `epochs`."""
    torch.manual_seed(0)
    probe = BatchedProbes(2, 12, 3, linear(l1=1e-3, l2=1e-3))
    module = NeuronProbes({"probe": probe}, lr=lr, **stopping)
    fit(module, ProbingDataModule(synthetic_splits(), batch_size=50), epochs, torch.device("cpu"))
    return probe, module


def test_without_patience_every_epoch_trains():
    _, module = fitted_probe(6)
    assert module.epochs_run == 6


def test_probes_that_stop_learning_stop_after_patience_epochs_at_their_first_best():
    _, module = fitted_probe(10, lr=0.0, patience=2)  # frozen: epoch 0 sets the best, epochs 1 and 2 gain nothing
    assert module.epochs_run == 3 and module.best_epochs["probe"].tolist() == [0, 0]


def test_a_gain_below_min_delta_does_not_keep_the_fit_going_and_the_kept_weights_are_an_unstopped_runs():
    stopped, module = fitted_probe(10, patience=2, min_delta=1.0)  # no gain of a whole point after the first epoch
    assert module.epochs_run == 3
    unstopped, reference = fitted_probe(3)
    assert torch.equal(module.best_epochs["probe"], reference.best_epochs["probe"])
    for name, value in stopped.state_dict().items():
        assert torch.equal(value, unstopped.state_dict()[name]), name


def test_the_majority_label_is_the_most_frequent_training_label_scored_on_test():
    train, test = torch.tensor([0, 1, 1, 2, 2]), torch.tensor([1, 1, 0, 2])  # a tie of 1 and 2: the first, 1
    assert majority(train, test, ["a", "b", "c"]) == {"label": "b", "test_accuracy": 0.5}
