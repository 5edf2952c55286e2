"""Probes trained straight from the forward pass (the probe's `online` setting): no store is written. Each step runs
the frozen encoder on a batch of tokenised records (the featurizer's `prepare_many`), captures and pools the
asked-for layers (`WordEncoder.encode`: hooks on those layers only, the forward stopped after the last) and steps one
probe per layer, all layers' probes one batched module (`BatchedProbes`, one input per head). Dev and test are scored
the same way.
See docs/scale.md, 'Probing without a store'."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from probing.features.featurizer import PreparedInput

# A source of features: (split, example indices) -> (layers, B, D) float32, the pooled vectors of each probed layer.
FeatureSource = Callable[[str, Tensor], Tensor]


@dataclass
class OnlineSplit:
    """A split's records ready to encode (those the featurizer could represent) and their labels (class indices)."""

    prepared: list[PreparedInput]
    labels: Tensor
    dropped: int = 0

    def __len__(self) -> int:
        return len(self.prepared)


def prepared_splits(featurizer: Any, splits: Mapping[str, Sequence[Any]], classes: Sequence[str]) -> dict[str,
                                                                                                         OnlineSplit]:
    """Each split's records tokenised once (`prepare_many`); a record the featurizer skips is left out and counted in
    `dropped`, as extraction leaves it out of the store. A record's label is its `sclass`, an index into `classes`."""
    index = {name: k for k, name in enumerate(classes)}
    prepared = {}
    for name, records in splits.items():
        records = list(records)
        inputs = featurizer.prepare_many(records)
        kept = [(item, index[record.sclass]) for item, record in zip(inputs, records) if item is not None]
        prepared[name] = OnlineSplit([item for item, _ in kept], torch.tensor([k for _, k in kept], dtype=torch.long),
                                     len(records) - len(kept))
    return prepared


def forward_source(featurizer: Any, splits: Mapping[str, OnlineSplit]) -> FeatureSource:
    """Features computed by the encoder's forward pass for each batch asked for: (layers, B, D) on the encoder's
    device, one row of layers per asked-for layer of the featurizer (`features.layers`), nothing kept between
    batches."""
    def features(split: str, indices: Tensor) -> Tensor:
        prepared = splits[split].prepared
        pooled = featurizer.encode([prepared[i] for i in indices.tolist()], on_device=True)
        # a copy made outside inference mode (encode's), so that autograd may save it for the probes' backward
        return pooled.transpose(0, 1).clone(memory_format=torch.contiguous_format)
    return features


def stored_source(vectors: Mapping[str, Tensor]) -> FeatureSource:
    """Features read from (N, layers, D) tensors per split, as a store holds them: the reference of the online path."""
    return lambda split, indices: vectors[split][indices].float().transpose(0, 1).contiguous()


@dataclass
class OnlineOutcome:
    """Per probed layer (in the order of `layers`): its probe's dev and test accuracy with the weights of its best dev
    epoch, and that epoch."""

    layers: list[int]
    scores: dict[str, list[float]] = field(default_factory=dict)
    best_epoch: list[int] = field(default_factory=list)
    epochs: int = 0


def accuracies(probes: Any, source: FeatureSource, split: OnlineSplit, name: str, batch_size: int) -> Tensor:
    """(heads,): the accuracy of each head on a whole split, read in its order, `batch_size` records at a time."""
    correct = torch.zeros(probes.num_heads)
    probes.eval()
    with torch.no_grad():
        for chunk in torch.arange(len(split)).split(batch_size):
            logits = probes(source(name, chunk)).cpu()  # (B, heads, K)
            correct += (logits.argmax(-1) == split.labels[chunk, None]).sum(0).float()
    probes.train()
    return correct / max(len(split), 1)


def train_layer_probes(source: FeatureSource, splits: Mapping[str, OnlineSplit], layers: Sequence[int],
                       input_dim: int, num_labels: int, family: Any, epochs: int, batch_size: int,
                       seed: int, device: torch.device | str = "cpu") -> OnlineOutcome:
    """One probe of `family` per layer, trained together on the training split (batches of `batch_size` in an order
    drawn from `seed` each epoch; the loss is the sum of each probe's mean cross-entropy, so each gets the gradient it
    would get alone), each keeping the weights of its best dev accuracy (earliest on ties); then dev and test scored.
    The probes are initialised from `seed` as `BatchedProbes` initialises heads, then moved to `device` (where the
    source gives the features)."""
    torch.manual_seed(seed)
    probes = family.probes(len(layers), input_dim, num_labels).to(device)
    optimizer = family.optimizer([{"params": list(probes.parameters())}])
    order = torch.Generator().manual_seed(seed)
    train, labels = splits["train"], splits["train"].labels
    best = torch.full((len(layers),), -1.0)
    best_epoch = torch.zeros(len(layers), dtype=torch.long)
    kept = probes.state_of_heads()
    for epoch in range(epochs):
        for chunk in torch.randperm(len(train), generator=order).split(batch_size):
            logits = probes(source("train", chunk))  # (B, heads, K)
            targets = labels[chunk].to(logits.device)
            loss = sum(F.cross_entropy(logits[:, head], targets) for head in range(len(layers)))
            optimizer.zero_grad()
            (loss + probes.penalty()).backward()
            optimizer.step()
        dev = accuracies(probes, source, splits["dev"], "dev", batch_size)
        better = (dev > best).to(device)
        best = torch.maximum(dev, best)
        best_epoch[better.cpu()] = epoch
        current = probes.state_of_heads()
        kept = {name: torch.where(better.view(-1, *[1] * (value.dim() - 1)), current[name], value)
                for name, value in kept.items()}
    probes.copy_heads_(kept, torch.ones(len(layers), dtype=torch.bool, device=device))
    scores = {name: accuracies(probes, source, splits[name], name, batch_size).tolist()
              for name in ("dev", "test") if name in splits}
    return OnlineOutcome(list(layers), scores, best_epoch.tolist(), epochs)
