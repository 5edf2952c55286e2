"""The reference of the online probes (`probing.probes.online`): the probes of several layers trained by a plain
PyTorch loop, no Lightning (the loop probe.online=true ran before it was fitted by the Trainer, kept as it was), with
the control task's probes beside them on labels shuffled by hand. Tests compare the Lightning module's per-layer
numbers with these."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

# (split, example indices) -> (layers, B, D) float32
Source = Callable[[str, Tensor], Tensor]


def control_labels(labels: Tensor, seed: int, position: int) -> Tensor:
    """A split's labels permuted by numpy's generator of [seed, position] (the split's place: train 0, dev 1, test 2):
    the class balance kept, each label moved off its example."""
    return labels[torch.from_numpy(np.random.default_rng([seed, position]).permutation(len(labels)))]


def accuracies(probes, source: Source, name: str, labels: Tensor, batch_size: int) -> Tensor:
    """(heads,): each head's accuracy on a whole split read in its order, `batch_size` records at a time."""
    correct = torch.zeros(probes.num_heads)
    probes.eval()
    with torch.no_grad():
        for chunk in torch.arange(len(labels)).split(batch_size):
            logits = probes(source(name, chunk)).cpu()  # (B, heads, K)
            correct += (logits.argmax(-1) == labels[chunk, None]).sum(0).float()
    probes.train()
    return correct / max(len(labels), 1)


def train_layer_probes(source: Source, labels: dict[str, Tensor], layers: Sequence[int], input_dim: int,
                       num_labels: int, family, epochs: int, batch_size: int, seed: int,
                       control_seed: int | None = None) -> dict:
    """One probe per layer trained on the training split in batches of an order drawn from `seed` each epoch (the
    loss the sum of every probe's mean cross-entropy), each keeping its best dev accuracy's weights (earliest on
    ties); with `control_seed`, as many control probes on the shuffled labels, drawn after the task's, each keeping
    its best dev control accuracy's. Returns {"dev"/"test": per-layer accuracy lists, "control_dev"/"control_test"
    (with the control task), "best_epoch", "control_best_epoch"}."""
    torch.manual_seed(seed)
    heads = {"task": family.probes(len(layers), input_dim, num_labels)}
    targets = {"task": labels}
    if control_seed is not None:
        heads["control"] = family.probes(len(layers), input_dim, num_labels)
        targets["control"] = {name: control_labels(split, control_seed, position)
                              for position, (name, split) in enumerate(labels.items())}
    optimizer = family.optimizer([{"params": list(head.parameters())} for head in heads.values()])
    order = torch.Generator().manual_seed(seed)
    best = {name: torch.full((len(layers),), -1.0) for name in heads}
    best_epoch = {name: torch.zeros(len(layers), dtype=torch.long) for name in heads}
    kept = {name: head.state_of_heads() for name, head in heads.items()}
    for epoch in range(epochs):
        for chunk in torch.randperm(len(labels["train"]), generator=order).split(batch_size):
            features = source("train", chunk)
            loss = 0
            for name, head in heads.items():
                logits = head(features)
                loss = loss + sum(F.cross_entropy(logits[:, k], targets[name]["train"][chunk])
                                  for k in range(len(layers))) + head.penalty()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        for name, head in heads.items():
            dev = accuracies(head, source, "dev", targets[name]["dev"], batch_size)
            better = dev > best[name]
            best[name] = torch.maximum(dev, best[name])
            best_epoch[name][better] = epoch
            current = head.state_of_heads()
            kept[name] = {key: torch.where(better.view(-1, *[1] * (value.dim() - 1)), current[key], value)
                          for key, value in kept[name].items()}
    outcome = {}
    for name, head in heads.items():
        head.copy_heads_(kept[name], torch.ones(len(layers), dtype=torch.bool))
        prefix = "" if name == "task" else "control_"
        outcome[f"{prefix}best_epoch"] = best_epoch[name].tolist()
        for split in ("dev", "test"):
            outcome[f"{prefix}{split}"] = accuracies(head, source, split, targets[name][split], batch_size).tolist()
    return outcome
