"""SClassProbe: trains with a real Lightning Trainer and separates a toy s-class problem."""

from __future__ import annotations

import json

import lightning
import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from probing.models import SClassProbe

CLASSES = ["food", "art", "location", "organization"]
DIM = 16


def toy_split(first_word: int, words_per_class: int, seed: int) -> list[dict]:
    """Contexts of word-s-class combinations; every class is a Gaussian cluster far from the others.

    Each class gets `words_per_class` words of its own plus one word shared with the next class, so some
    words occur in two combinations. Word (and combination) ids start at `first_word`: splits built with
    disjoint ranges are word-disjoint.
    """
    generator = torch.Generator().manual_seed(seed)
    centres = 6.0 * torch.eye(len(CLASSES), DIM)
    combinations = []
    word = first_word
    for k in range(len(CLASSES)):
        combinations += [(word + i, k) for i in range(words_per_class)]
        shared = word + words_per_class
        combinations += [(shared, k), (shared, (k + 1) % len(CLASSES))]
        word += words_per_class + 1
    contexts = []
    for combination_id, (word, label) in enumerate(combinations, start=first_word * 10):
        n_contexts = int(torch.randint(1, 6, (1,), generator=generator))
        features = centres[label] + torch.randn(n_contexts, DIM, generator=generator)
        contexts += [{"features": f, "label": label, "combination": combination_id} for f in features]
    return contexts


def loader(contexts: list[dict], shuffle: bool = False) -> DataLoader:
    return DataLoader(contexts, batch_size=32, shuffle=shuffle)


def trainer(max_epochs: int) -> lightning.Trainer:
    return lightning.Trainer(
        max_epochs=max_epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )


@pytest.fixture(scope="module")
def splits():
    return {"train": toy_split(0, 6, seed=0), "dev": toy_split(100, 3, seed=1), "test": toy_split(200, 3, seed=2)}


def test_probe_separates_word_disjoint_toy_classes(splits):
    lightning.seed_everything(0, verbose=False)
    model = SClassProbe(input_dim=DIM, class_names=CLASSES, hidden_dim=32, lr=1e-2)
    run = trainer(max_epochs=10)

    run.validate(model, loader(splits["dev"]), verbose=False)
    untrained = model.split_metrics["dev"]["micro_f1"]

    run.fit(model, loader(splits["train"], shuffle=True), loader(splits["dev"]))
    assert {"train/loss", "dev/micro_f1", "dev/context_accuracy"} <= set(run.callback_metrics)
    run.test(model, loader(splits["test"]), verbose=False)
    assert {"test/micro_f1", "test/context_accuracy"} <= set(run.callback_metrics)

    dev, test = model.split_metrics["dev"], model.split_metrics["test"]
    assert untrained < 0.6
    assert dev["micro_f1"] >= 0.99 and test["micro_f1"] >= 0.99
    assert dev["n_combinations"] == 4 * (3 + 2) and dev["n_contexts"] == len(splits["dev"])
    assert json.loads(json.dumps(model.split_metrics)) == model.split_metrics  # plain Python, ready for results.json


def test_loss_is_sum_of_each_probes_own_mean_cross_entropy():
    torch.manual_seed(0)
    model = SClassProbe(input_dim=DIM, class_names=CLASSES, hidden_dim=8)
    features, labels = torch.randn(5, DIM), torch.tensor([0, 2, 2, 3, 1])
    by_hand = sum(
        F.cross_entropy(model.probes.as_sequential(k)(features), (labels == k).long()) for k in range(len(CLASSES))
    )
    torch.testing.assert_close(model.probe_loss(model(features), labels), by_hand)


def test_predict_positive_prob_is_softmax_of_positive_logit():
    torch.manual_seed(0)
    model = SClassProbe(input_dim=DIM, class_names=CLASSES, hidden_dim=8)
    features = torch.randn(3, DIM)
    prob = model.predict_positive_prob(features)
    logits = model(features)
    assert prob.shape == (3, len(CLASSES))
    torch.testing.assert_close(prob, torch.sigmoid(logits[..., 1] - logits[..., 0]))
