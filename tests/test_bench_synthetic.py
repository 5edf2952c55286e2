"""bench/synthetic.py, the synthetic stores of the probe benches: class sizes in the real balance (by hand), labels and
combination ids of that balance, sentence lengths that add up, and a features file made once and then reused."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from tests.helpers import REPO


def load_synthetic():
    spec = importlib.util.spec_from_file_location("bench_synthetic", REPO / "bench" / "synthetic.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


synthetic = load_synthetic()


def test_class_sizes_keep_the_real_shares_by_largest_remainders():
    # shares 1/2, 1/3, 1/6 of 10: 5, 3.33, 1.67 -> floors 5, 3, 1 (9), the largest remainder (.67) gets the 10th
    assert synthetic.class_sizes([3, 2, 1], 10) == [5, 3, 2]
    # a class without contexts stays without; exact shares stay exact
    assert synthetic.class_sizes([1, 0, 1], 4) == [2, 0, 2]
    with pytest.raises(ValueError):
        synthetic.class_sizes([0, 0], 5)


def test_synthetic_labels_have_the_real_balance_and_combinations_per_class():
    real_labels = np.array([0] * 6 + [1] * 3 + [2] * 1)
    real_combinations = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 5])  # class 0: 3 combinations, 1: 2, 2: 1
    shape = synthetic.LabelShape.of(real_labels, real_combinations, 3)
    assert shape == synthetic.LabelShape((6, 3, 1), (3, 2, 1))
    labels, combinations = synthetic.synthetic_labels(shape, 1000, seed=0)
    assert np.bincount(labels).tolist() == [600, 300, 100]
    for k, per_context in enumerate((3 / 6, 2 / 3, 1 / 1)):
        ids = np.unique(combinations[labels == k])
        drawn = round(np.sum(labels == k) * per_context)  # ids drawn from; some may go unused
        assert drawn / 2 <= len(ids) <= drawn
        assert not np.isin(ids, combinations[labels != k]).any()  # a combination id has one class
    again = synthetic.synthetic_labels(shape, 1000, seed=0)
    assert np.array_equal(again[0], labels) and np.array_equal(again[1], combinations)


def test_sentence_lengths_add_up_to_the_words_asked_for():
    lengths = synthetic.sentence_lengths([5, 12, 30], 1001, seed=3)
    assert sum(lengths) == 1001 and set(lengths[:-1]) <= {5, 12, 30} and 1 <= lengths[-1] <= 30


def test_split_sizes_keep_the_real_proportions():
    assert synthetic.split_sizes({"train": 100, "dev": 20, "test": 30}, 2000) == {"train": 2000, "dev": 400,
                                                                                   "test": 600}


def test_the_features_file_is_made_once_per_shape_and_seed(tmp_path):
    path = synthetic.features_file(70_000, 2, 3, seed=1, cache=tmp_path)  # more rows than one chunk
    features = np.load(path, mmap_mode="r")
    assert features.shape == (2, 70_000, 3) and features.dtype == np.float16
    assert abs(float(features.astype(np.float32).std()) - 1) < 0.01  # standard normal
    made = path.stat().st_mtime_ns
    assert synthetic.features_file(70_000, 2, 3, seed=1, cache=tmp_path) == path
    assert path.stat().st_mtime_ns == made  # reused, not made again
    assert synthetic.read_layer(path, 1).dtype == np.float32
    other = synthetic.features_file(70_000, 2, 3, seed=2, cache=tmp_path)
    assert other != path and not np.array_equal(np.load(other)[0, :5], features[0, :5])
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []
