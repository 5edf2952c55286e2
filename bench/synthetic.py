"""Synthetic feature stores for the probe benches (`--synthetic-contexts N` of bench/probe.py and bench/tree_probe.py):
N contexts with the real shapes and random values, so that probe training is timed at the paper's scale (Zhao et al.
train on 5.4 M contexts; 200,000 and more give an epoch of ~800 steps at batch 256) without extracting that many.

What is real: the number of layers and their width (read from a real store, or given), the classes and their
balance (each class's share of the real training split, kept to within one context by largest remainders), and the
contexts per (word, class) combination (combination ids drawn so that each class has as many combinations per
context as in the real split). What is random: the feature values (standard normal, stored as float16 like a real
store; the cost of a training step does not depend on them, so the dev/test scores of a synthetic run mean nothing)
and which context gets which label.

The features, every layer of them, are made once per shape and seed and kept as one `.npy` file, (layers, N, width)
float16, in a cache folder (default: `probing-bench-synthetic` under the system's temp folder), named by the shape
and the seed; later runs map the file and read the one layer they train on. The labels and combination ids are drawn
again on every run from the same seed (cheap and deterministic).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

DEFAULT_CACHE = Path(tempfile.gettempdir()) / "probing-bench-synthetic"
CHUNK_ROWS = 65_536  # rows drawn at a time: the memory used while making a file stays flat


def features_file(contexts: int, num_layers: int, width: int, seed: int, cache: Path | None = None) -> Path:
    """The cached (num_layers, contexts, width) float16 standard-normal features of this shape and seed, made on the
    first call (written beside, then renamed into place: a run stopped half-way leaves no file taken for whole)."""
    cache = Path(cache or DEFAULT_CACHE)
    path = cache / f"features-n{contexts}-l{num_layers}-d{width}-s{seed}.npy"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.npy")
    array = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float16, shape=(num_layers, contexts, width))
    generator = torch.Generator().manual_seed(seed)
    for layer in range(num_layers):
        for start in range(0, contexts, CHUNK_ROWS):
            rows = min(CHUNK_ROWS, contexts - start)
            array[layer, start:start + rows] = torch.randn(rows, width, generator=generator).half().numpy()
    array.flush()
    del array
    os.replace(partial, path)
    return path


def read_layer(path: Path, layer: int) -> np.ndarray:
    """One layer of a features file, (contexts, width) float32."""
    return np.asarray(np.load(path, mmap_mode="r")[layer], dtype=np.float32)


def class_sizes(real_counts: Sequence[int], contexts: int) -> list[int]:
    """`contexts` split between the classes in the proportions of `real_counts` (largest remainders: each size is
    the real share rounded down or up, and they sum to `contexts`)."""
    counts = np.asarray(real_counts, dtype=np.float64)
    if counts.sum() <= 0 or contexts < 0:
        raise ValueError(f"need positive class counts and contexts >= 0, got {list(real_counts)} and {contexts}")
    exact = counts / counts.sum() * contexts
    sizes = np.floor(exact).astype(np.int64)
    by_remainder = np.argsort(-(exact - sizes), kind="stable")
    sizes[by_remainder[:contexts - int(sizes.sum())]] += 1
    return sizes.tolist()


@dataclass(frozen=True)
class LabelShape:
    """What a split's labels look like: contexts per class and (word, class) combinations per class."""

    class_counts: tuple[int, ...]
    combination_counts: tuple[int, ...]

    @classmethod
    def of(cls, labels: np.ndarray, combinations: np.ndarray, num_classes: int) -> LabelShape:
        """The shape of real labels (N,) and combination ids (N,)."""
        labels, combinations = np.asarray(labels), np.asarray(combinations)
        counts = np.bincount(labels, minlength=num_classes)
        combos = [len(np.unique(combinations[labels == k])) for k in range(num_classes)]
        return cls(tuple(int(c) for c in counts), tuple(combos))


def synthetic_labels(shape: LabelShape, contexts: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(labels (contexts,) int64, combination ids (contexts,) int64) of `contexts` contexts in the class balance of
    `shape`, in random order; class k's contexts fall into as many combinations per context as the real split's
    (at least one), each id belonging to one class."""
    generator = np.random.default_rng(seed)
    sizes = class_sizes(shape.class_counts, contexts)
    labels = np.repeat(np.arange(len(sizes)), sizes)
    combinations = np.empty(contexts, dtype=np.int64)
    start, first_id = 0, 0
    for size, real, real_combos in zip(sizes, shape.class_counts, shape.combination_counts):
        combos = max(1, round(size * real_combos / real)) if real else 1
        combinations[start:start + size] = first_id + generator.integers(combos, size=size)
        start, first_id = start + size, first_id + combos
    order = generator.permutation(contexts)
    return labels[order].astype(np.int64), combinations[order]


def split_sizes(real_rows: dict[str, int], train_contexts: int) -> dict[str, int]:
    """Each split's contexts: `train_contexts` for train, the others in their real proportion to it."""
    return {split: train_contexts if split == "train" else max(1, round(train_contexts * rows / real_rows["train"]))
            for split, rows in real_rows.items()}


def sentence_lengths(real_lengths: Sequence[int], words: int, seed: int) -> list[int]:
    """Sentences drawn (with replacement, seeded) from `real_lengths` until they hold `words` words; the last one
    cut to fit, so the lengths sum to exactly `words`."""
    generator = np.random.default_rng(seed)
    lengths, total = [], 0
    while total < words:
        length = int(real_lengths[generator.integers(len(real_lengths))])
        lengths.append(min(length, words - total))
        total += lengths[-1]
    return lengths
