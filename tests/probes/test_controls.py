"""The control task (Hewitt & Liang 2019): one random class per word type, fixed by (seed, word)."""

from __future__ import annotations

import numpy as np
import pytest

from probing.features.static_embeddings import word_seed
from probing.probes import controls
from probing.probes.controls import class_distribution, control_classes

WORDS = [f"word{i}" for i in range(200)]
UNIFORM = np.full(4, 0.25)


def test_class_distribution_by_hand():
    np.testing.assert_allclose(class_distribution(np.array([2, 0, 6])), [0.25, 0.0, 0.75])
    with pytest.raises(ValueError, match="no labelled example"):
        class_distribution(np.array([0, 0, 0]))


def test_a_word_class_depends_only_on_seed_and_word():
    classes = control_classes(WORDS, UNIFORM, seed=3)
    assert classes.dtype == np.int64 and classes.shape == (200,)
    np.testing.assert_array_equal(control_classes(WORDS, UNIFORM, seed=3), classes)
    shuffled = np.random.default_rng(0).permutation(len(WORDS))
    np.testing.assert_array_equal(control_classes([WORDS[i] for i in shuffled], UNIFORM, seed=3), classes[shuffled])
    subset = WORDS[50:60] + ["unrelated", "others"]
    np.testing.assert_array_equal(control_classes(subset, UNIFORM, seed=3)[:10], classes[50:60])
    other_seed = control_classes(WORDS, UNIFORM, seed=4)
    assert 100 < (other_seed != classes).sum() < 200  # about 3/4 of the words change class


def test_inverse_cdf_draw_by_hand():
    # u = word_seed / 2**64; with [0.5, 0.5] class 0 iff u < 0.5
    expected = [int(word_seed(7, word) / 2**64 >= 0.5) for word in WORDS]
    assert control_classes(WORDS, np.array([0.5, 0.5]), seed=7).tolist() == expected


def test_class_frequencies_follow_the_distribution():
    words = [f"w{i}" for i in range(20_000)]
    classes = control_classes(words, np.array([0.7, 0.2, 0.1, 0.0]), seed=0)
    frequencies = np.bincount(classes, minlength=4) / len(words)
    np.testing.assert_allclose(frequencies[:3], [0.7, 0.2, 0.1], atol=0.015)
    assert frequencies[3] == 0


def test_a_class_of_probability_zero_in_the_middle_is_never_drawn():
    classes = control_classes(WORDS * 5 + [f"x{i}" for i in range(2000)], np.array([0.5, 0.0, 0.5]), seed=1)
    assert set(classes.tolist()) == {0, 2}


def test_the_largest_uniform_draws_the_last_class_of_positive_probability(monkeypatch):
    monkeypatch.setattr(controls, "word_seed", lambda seed, word: 2**64 - 1)
    assert control_classes(["any"], np.array([0.7, 0.2, 0.1, 0.0]), seed=0).tolist() == [2]


def test_seen_rows_keep_one_training_context_per_word_by_hand():
    # fraction just below 1: every row is drawn out, then each word's first row goes back to training
    held = controls.seen_rows(np.array([0, 0, 0, 1, 2, 2, 1]), fraction=1 - 1e-12, seed=0)
    assert held.tolist() == [False, True, True, False, False, True, True]
    assert not controls.seen_rows(np.array([0, 0, 1]), fraction=0.0, seed=0).any()


def test_seen_rows_draw_the_fraction_and_never_take_a_word_out_of_training():
    rng = np.random.default_rng(1)
    word_ids = np.concatenate([rng.integers(0, 300, 5000), np.arange(300, 400)])  # words 300..399 occur once
    held = controls.seen_rows(word_ids, fraction=0.3, seed=7)
    assert set(word_ids[held]) <= set(word_ids[~held])  # every held-out word still has a training context
    assert not held[-100:].any()  # a word with one context never enters the seen split
    assert held.mean() == pytest.approx(0.3 * 5000 / 5100, abs=0.02)
    assert (held == controls.seen_rows(word_ids, 0.3, seed=7)).all()
    assert (held != controls.seen_rows(word_ids, 0.3, seed=8)).any()
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        controls.seen_rows(word_ids, 1.0, seed=0)
