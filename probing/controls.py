"""The control task of Hewitt & Liang (2019), adapted to s-class probing.

Every word type gets one random s-class, drawn from the empirical class distribution of the training data
and fixed by (seed, word): all contexts of a word share its control class, in every split. The same probe is
trained on these labels, and selectivity = score on the real task - score on the control task is reported
(on the probe's own measure, Zhao's micro-F1, and on context accuracy).

What it measures here. Hewitt & Liang evaluate on words seen in training, so a probe that memorises word
identities scores high on their control task. Zhao's splits are word-disjoint: a dev/test word's control class
was never seen, cannot be inferred from any representation, and the control score is what a probe reaches by
guessing from the class prior (plus noise). Selectivity is then the real score above that floor: it says how
much of the score needs the representation rather than the label distribution, not how much the probe could
memorise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from probing.embeddings import word_seed

UNIT = float(2**64)


def class_distribution(counts: np.ndarray) -> np.ndarray:
    """Probabilities from per-class counts (e.g. of the training contexts); every class may be drawn only if seen."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.sum() <= 0:
        raise ValueError("cannot draw control classes: the training data has no labelled example")
    return counts / counts.sum()


def control_classes(words: Sequence[str], probabilities: np.ndarray, seed: int) -> np.ndarray:
    """The control class of each word: inverse-CDF draw of a uniform number fixed by (seed, word).

    A word's class depends only on the seed, the word and the distribution, not on the split it is in or on the
    order of `words`."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    cdf = np.cumsum(probabilities)
    cdf[np.flatnonzero(probabilities > 0)[-1]:] = 1.0  # rounding must not let a class of probability 0 be drawn
    uniforms = np.array([word_seed(seed, word) / UNIT for word in words], dtype=np.float64)
    uniforms = np.minimum(uniforms, np.nextafter(1.0, 0.0))  # 2**64 - 1 rounds to 1.0 in float64
    return np.searchsorted(cdf, uniforms, side="right").astype(np.int64)
