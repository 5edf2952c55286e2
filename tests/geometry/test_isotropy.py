"""Bis et al. 2021 isotropy, checked against values computed by hand: I(W) of an isotropic and a shifted set, the
three transformations, log-sum-exp at huge norms, Fig. 3's bins, and the refusal of a model without input embeddings."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from probing.errors import ConfigError
from probing.geometry import isotropy as iso

PLUS_MINUS_E = np.array([[1.0, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]])
# ±e_1, ±e_2 in 2-D shifted by (0.5, 0): WᵀW = diag(3, 2), so the eigenvectors are ±e_1, ±e_2.
SHIFTED = np.array([[1.5, 0.0], [-0.5, 0.0], [0.5, 1.0], [0.5, -1.0]])


def test_the_plus_minus_unit_vectors_are_perfectly_isotropic():
    assert iso.isotropy(PLUS_MINUS_E) == pytest.approx(1.0, abs=1e-12)


def test_a_shifted_set_is_less_isotropic_by_the_hand_computed_ratio():
    z_e1 = math.exp(1.5) + math.exp(-0.5) + 2 * math.exp(0.5)      # Z(+e_1), the largest
    z_minus_e1 = math.exp(-1.5) + math.exp(0.5) + 2 * math.exp(-0.5)  # Z(-e_1), the smallest
    z_e2 = 2 + math.e + 1 / math.e                                      # Z(±e_2)
    assert z_minus_e1 < z_e2 < z_e1
    assert iso.isotropy(SHIFTED) == pytest.approx(z_minus_e1 / z_e1, rel=1e-12)
    assert iso.isotropy(iso.center(SHIFTED)) == pytest.approx(1.0, abs=1e-12)  # centring gives ±e_1, ±e_2 back


def test_log_sum_exp_is_stable_for_huge_norms():
    assert iso.log_partition(np.array([[1000.0], [998.0]]), np.array([[1.0]]))[0] == pytest.approx(
        1000 + math.log(1 + math.exp(-2)), rel=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert iso.isotropy(1e4 * PLUS_MINUS_E) == pytest.approx(1.0, abs=1e-12)
        huge = np.array([[300.0, 0], [-300, 0], [0, 1], [0, -1]])  # exp(300 * 1e3) would overflow if computed naively
        expected = math.log(2 + math.e + 1 / math.e) - (300 + math.log1p(2 * math.exp(-300) + math.exp(-600)))
        assert iso.isotropy(huge) == pytest.approx(math.exp(expected), rel=1e-9)
        assert 0 <= iso.isotropy(1e3 * SHIFTED) < 1e-300


def test_centring_makes_the_mean_zero():
    W = np.random.default_rng(0).normal(loc=3.0, size=(40, 5))
    assert np.abs(iso.center(W).mean(axis=0)).max() < 1e-12
    assert np.allclose(iso.TRANSFORMS["centered"](W), W - W.mean(axis=0))


def test_scaled_centring_matches_a_hand_computed_3x2_case():
    W = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]])  # norms 5, 1, 2; unit rows (.6,.8), (1,0), (0,1)
    # μ̂ = (1.6, 1.8) / 3 = (8/15, 3/5); e' = e - ‖e‖ μ̂
    expected = np.array([[1 / 3, 1.0], [7 / 15, -3 / 5], [-16 / 15, 4 / 5]])
    assert np.allclose(iso.scaled_center(W), expected, atol=1e-12)


def test_a_zero_row_has_no_direction_in_scaled_centring():
    W = np.array([[3.0, 4.0], [0.0, 0.0]])  # μ̂ = (0.6, 0.8) / 2
    assert np.allclose(iso.scaled_center(W), [[3 - 1.5, 4 - 2.0], [0, 0]])


def test_pc_removal_leaves_the_matrix_orthogonal_to_the_removed_directions():
    rng = np.random.default_rng(1)
    W = rng.normal(size=(200, 6)) * np.array([9.0, 5, 3, 1, 1, 1]) + 4.0
    centred = W - W.mean(axis=0)
    _, _, right = np.linalg.svd(centred, full_matrices=False)  # independently of the eigensolver used by the module
    processed = iso.postprocess(W, removed=2)
    assert np.abs(processed @ right[:2].T).max() < 1e-9
    assert np.allclose(processed, centred - centred @ right[:2].T @ right[:2])
    assert np.allclose(iso.postprocess(W, removed=0), centred)
    assert iso.default_removed(384) == 4 and iso.default_removed(768) == 8 and iso.default_removed(100) == 1
    assert np.allclose(iso.TRANSFORMS["postprocessed"](W), iso.postprocess(W, removed=1))  # ⌈6/100⌉ = 1


def test_the_transforms_and_table_1():
    assert list(iso.TRANSFORMS) == ["original", "centered", "scaled_centered", "postprocessed"]
    W = SHIFTED
    table = iso.table1({name: transform(W) for name, transform in iso.transforms(1).items()}, 1)
    assert table["I_W"] == pytest.approx(iso.isotropy(W)) and table["I_W_centered"] == pytest.approx(1.0)
    assert table["mean_norm"] == pytest.approx((1.5 + 0.5 + 2 * math.sqrt(1.25)) / 4)
    assert table["mean_vector_norm"] == pytest.approx(0.5)
    assert table["mean_vector_norm_ratio"] == pytest.approx(0.5 / table["mean_norm"])
    assert (table["vectors"], table["dimensions"], table["pc_removed"]) == (4, 2, 1)


@pytest.mark.parametrize("removed", [-1, 2, 1.5, True])
def test_a_number_of_components_outside_the_dimensions_is_refused(removed):
    with pytest.raises(ConfigError, match="analysis.pc_removed=.*Fix: analysis.pc_removed=null"):
        iso.check_removed(removed, 2)


def test_unused_tokens_and_the_fig3_bins():
    assert iso.unused_token_ids({"[unused0]": 5, "[UNK]": 1, "[unused12]": 3, "unused": 7, "[unused]": 2}) == [3, 5]
    W = np.array([[1.0, 0], [1, 0], [0, 1], [1, 1], [-1, 0]])  # row 1 is the unused token
    rows = iso.unused_token_cosine({"original": W}, [1], bin_size=2)
    assert [(row["bin_start"], row["bin_end"], row["tokens"]) for row in rows] == [(0, 1, 1), (2, 3, 2), (4, 4, 1)]
    assert [row["original"] for row in rows] == pytest.approx([1.0, (0 + math.sqrt(0.5)) / 2, -1.0])


def test_mean_pooling_of_wordpieces():
    hidden = torch.arange(10.0).reshape(5, 2)  # [CLS] w0 w0 w1 [SEP]
    vectors, words = iso.mean_pool_words(hidden, [None, 0, 0, 1, None], ["airheads", "eat"])
    assert words == ["airheads", "eat"]
    assert torch.equal(vectors[0], torch.tensor([3.0, 4.0])) and torch.equal(vectors[1], torch.tensor([6.0, 7.0]))


def test_single_wordpiece_lookup(tiny_bert_path):
    from transformers import AutoTokenizer

    lookup = iso.token_lookup(AutoTokenizer.from_pretrained(tiny_bert_path))
    assert lookup("apple") == 7 and lookup("Apple") == 7  # uncased
    assert lookup("airheads") is None and lookup("qqq") is None  # subword units; unknown


class NoEmbeddings(torch.nn.Module):
    def get_input_embeddings(self):
        raise NotImplementedError


def test_a_model_without_input_embeddings_is_refused():
    with pytest.raises(ConfigError, match="has no input embedding matrix. Fix: .*layer=<N>"):
        iso.input_embeddings(NoEmbeddings(), "odd")


def test_fig3_tokens_are_the_unused_ones_or_else_the_last_ids():
    assert iso.fig3_token_ids({"[PAD]": 0, "[unused0]": 1, "[unused1]": 2, "the": 3}, 4, fallback=2) == (
        [1, 2], "unused")
    bpe = {"<s>": 0, "Ġthe": 1, "Ġa": 2, "Ġcat": 3, "Ġdog": 4}  # byte-level BPE: no [unused*] tokens
    assert iso.fig3_token_ids(bpe, 5, fallback=2) == ([3, 4], "last_ids")
    assert iso.fig3_token_ids(bpe, 5, fallback=5) == ([], "none")  # nothing left to compare them with
