"""The online code of Voita & Titov 2020 §2.2: block ends, uniform and online codelengths, computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probing.errors import ConfigError, ProbingError
from probing.probes.bits import mdl
from probing.probes.bits.mdl import (
    DEFAULT_FRACTIONS,
    OnlineCode,
    block_ends,
    mdl_order,
    online_code,
    online_codelength,
    uniform_codelength,
)


def test_default_fractions_are_the_papers_percentages():
    percent = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50, 100)
    assert list(DEFAULT_FRACTIONS) == pytest.approx([p / 100 for p in percent])


def test_block_ends_of_1000_examples_round_halves_up():
    # 0.0625 * 1000 = 62.5 -> 63 (halves up; Python's round() would give 62)
    assert block_ends(1000) == [1, 2, 4, 8, 16, 32, 63, 125, 250, 500, 1000]


def test_block_ends_of_few_examples_drop_repeated_ends():
    # 100 examples: 0.1, 0.2, 0.4 -> max(1, 0) = 1; 0.8 -> 1; 1.6 -> 2; 3.2 -> 3; 6.25 -> 6; 12.5 -> 13
    assert block_ends(100) == [1, 2, 3, 6, 13, 25, 50, 100]
    assert block_ends(3) == [1, 2, 3]  # 0.5 * 3 = 1.5 -> 2
    assert block_ends(1) == [1]


def test_block_ends_with_own_fractions():
    assert block_ends(10, [0.25, 0.5, 1]) == [3, 5, 10]  # 2.5 -> 3


def test_block_ends_of_no_examples_is_an_error():
    with pytest.raises(ProbingError, match="at least one training example"):
        block_ends(0)


@pytest.mark.parametrize("fractions", [[0.5, 0.9], [0.5, 0.2, 1.0], [0.0, 1.0], [0.5, 0.5, 1.0], [1.5], [],
                                       "0.5,1.0", [True, 1.0], ["0.5", 1.0]])
def test_bad_fractions_name_the_setting(fractions):
    with pytest.raises(ConfigError, match="^mdl_fractions="):
        block_ends(100, fractions)


def test_uniform_codelength_is_n_log2_k():
    assert uniform_codelength(1000, 8) == pytest.approx(3000.0)
    assert uniform_codelength(10, 17) == pytest.approx(10 * math.log2(17))


def test_online_codelength_with_a_probe_that_gives_half_to_the_right_label():
    # every later example costs -log2(0.5) = 1 bit, so the code is t1 log2 K + (n - t1) bits
    ends = block_ends(1000)
    block_bits = [float(b - a) for a, b in zip(ends, ends[1:])]
    assert online_codelength(ends[0], 4, block_bits) == pytest.approx(1 * 2 + 999)
    result = mdl.summary(4, ends, block_bits)
    assert result["codelength_bits"] == pytest.approx(1001.0)
    assert result["uniform_codelength_bits"] == pytest.approx(2000.0)
    assert result["compression"] == pytest.approx(2000 / 1001)
    assert result["block_ends"] == ends
    assert result["block_fractions"] == pytest.approx([end / 1000 for end in ends])
    assert result["block_bits"] == block_bits
    assert "control_codelength_bits" not in result


def test_summary_with_a_control_task():
    result = mdl.summary(2, [2, 4], [1.0], control_block_bits=[2.0])
    # uniform 4 bits; online 2 * 1 + 1 = 3; control 2 + 2 = 4
    assert result["codelength_bits"] == pytest.approx(3.0)
    assert result["control_codelength_bits"] == pytest.approx(4.0)
    assert result["compression"] == pytest.approx(4 / 3)
    assert result["control_compression"] == pytest.approx(1.0)
    assert result["control_block_bits"] == [2.0]


def test_summary_refuses_bits_that_do_not_match_the_blocks():
    with pytest.raises(ProbingError, match="block"):
        mdl.summary(2, [1, 2, 4], [1.0])


def test_the_online_code_is_built_from_its_settings_or_is_none():
    code = online_code(True, None, seed=3)
    assert isinstance(code, OnlineCode) and code.block_ends(1000) == block_ends(1000)
    assert np.array_equal(code.order(50), mdl_order(50, 3))  # the datamodule's order: the seed's permutation
    assert online_code(True, [0.5, 1.0]).block_ends(10) == [5, 10]
    assert online_code(False, [0.5, 1.0]) is None
    with pytest.raises(ConfigError, match="^mdl must be"):
        online_code("yes")
    with pytest.raises(ConfigError, match="^mdl_fractions="):
        online_code(False, [0.5])  # checked when off too: turning it on later must not be what reveals it


@pytest.mark.parametrize("settings,message", [
    ({"level": "type"}, "^mdl=true sends the labels of the training contexts; level=type"),
    ({"reuse": "logs/probe/runs/x"}, "^mdl=true trains the prefix probes of the online code; reuse"),
])
def test_the_online_code_refuses_what_it_cannot_send(settings, message):
    with pytest.raises(ConfigError, match=message):
        online_code(True, **settings)
    assert online_code(False, **settings) is None


def test_several_labels_per_example_multiply_the_uniform_code():
    # the s-class task: C = 26 binary decisions per context
    assert mdl.uniform_codelength(10, 2, labels_per_example=26) == pytest.approx(260.0)
    result = mdl.summary(2, [2, 10], [40.0], labels_per_example=26)
    assert result["uniform_codelength_bits"] == pytest.approx(260.0)
    assert result["codelength_bits"] == pytest.approx(2 * 26 + 40.0)


def test_scores_and_description_of_a_results_block():
    results = {"mdl": mdl.summary(4, [4, 20, 40], [16.0, 20.0], [30.0, 40.0])}
    assert mdl.scores(results) == {"mdl/codelength_bits": 44.0, "mdl/compression": 80 / 44,
                                   "mdl/control_codelength_bits": 78.0, "mdl/control_compression": 80 / 78}
    assert mdl.describe(results) == ", online codelength 0.0 kbits (compression 1.82; control 0.1 kbits, 1.03)"
    assert mdl.scores({}) == {} and mdl.describe({}) == ""


def test_mdl_order_is_a_seeded_permutation():
    order = mdl.mdl_order(50, seed=1)
    assert sorted(order.tolist()) == list(range(50))
    assert order.tolist() == mdl.mdl_order(50, seed=1).tolist() != mdl.mdl_order(50, seed=2).tolist()
