"""Attention windows: the mask entry by entry, what a windowed model's hidden states depend on (eager and sdpa,
BERT, GPT-2, MiniLM), padding, the encoder option, its store and its config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModel, BertConfig, BertModel, GPT2Config, GPT2Model, RobertaConfig, RobertaModel

from probing.config import build
from probing.data.records import WordInContext
from probing.errors import ConfigError, ModelLoadError, StoreMismatchError
from probing.features.attention import (
    as_model_mask,
    check_window_support,
    model_attention_mask,
    parse_attention_window,
    window_mask,
)
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split
from probing.features.store import store_path
from tests.helpers.runs import compose_job, tiny_model

IMPLEMENTATIONS = ("eager", "sdpa")
# [CLS] w0 w1 w1 w2 w3 w4 w4 w5 w6 [SEP]: seven words, two of them in two pieces
WORD_IDS = [None, 0, 1, 1, 2, 3, 4, 4, 5, 6, None]
VOCAB = 40


def mask_rows(*rows: str) -> torch.Tensor:
    return torch.tensor([[int(c) for c in row.replace(" ", "")] for row in rows], dtype=torch.bool)


# Weights 10x the usual init scale: with std 0.02 attention is nearly uniform and a change two hops away moves a
# hidden state by less than float noise; with 0.2 every change within reach moves it by more than 1e-3.
INIT_RANGE = 0.2


def tiny_bert(implementation: str, **overrides) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, attn_implementation=implementation,
                        initializer_range=INIT_RANGE, **overrides)
    return BertModel(config).eval()


def tiny_gpt2(implementation: str) -> GPT2Model:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=3, n_head=2, n_positions=64, bos_token_id=0,
                        eos_token_id=0, initializer_range=INIT_RANGE, attn_implementation=implementation)
    return GPT2Model(config).eval()


def hidden_states(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(layers, B, T, D): every hidden state, the embedding output (layer 0) included."""
    with torch.no_grad():
        output = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    return torch.stack(output.hidden_states)


def variants(base: list[int], positions: list[int], vocab: range) -> torch.Tensor:
    """Row 0: `base`; row i: `base` with the id at positions[i - 1] replaced by another id of `vocab`."""
    rows = [list(base)]
    for position in positions:
        row = list(base)
        row[position] = vocab[(vocab.index(base[position]) + 7) % len(vocab)]
        rows.append(row)
    return torch.tensor(rows)


def changed(states: torch.Tensor) -> torch.Tensor:
    """(variants, layers, T) bool: where each variant's hidden states moved away from row 0's; a position that
    moves by more than 1e-6 but less than 1e-5 fails the test (neither clearly changed nor the same: eager
    attention over a batch differs from row to row by up to ~7e-7)."""
    difference = (states[:, 1:] - states[:, :1]).abs().amax(dim=-1).permute(1, 0, 2)
    assert not ((difference > 1e-6) & (difference <= 1e-5)).any(), "a change too small to call either way"
    return difference > 1e-5


def expected_changes(word_ids: list[int | None], positions: list[int], window: int, layers: int,
                     causal: bool = False) -> torch.Tensor:
    """(variants, layers, T) bool, computed from the rules: the embedding output (layer 0) changes at the replaced
    position only; the output of layer l of a word changes iff the replaced word is at most l * window words away
    (and not to its right in a causal model); special tokens see every change from layer 1 on."""
    expected = torch.zeros(len(positions), layers, len(word_ids), dtype=torch.bool)
    for v, position in enumerate(positions):
        expected[v, 0, position] = True
        source = word_ids[position]
        for layer in range(1, layers):
            for p, word in enumerate(word_ids):
                if word is None or source is None:
                    expected[v, layer, p] = word is None or p == position
                else:
                    distance = word - source
                    expected[v, layer, p] = abs(distance) <= layer * window and (distance >= 0 or not causal)
    return expected


# --- the mask, entry by entry -------------------------------------------------------------------------------


def test_window_mask_by_hand():
    """[CLS] w0 w1a w1b w2 w3a w3b w4 [SEP] pad pad, k = 1: words see the words at most one away, specials see
    every real token and are seen by specials only, padding sees itself only and is seen by nobody else."""
    padding = torch.tensor([[1] * 9 + [0, 0]])
    mask = window_mask([[None, 0, 1, 1, 2, 3, 3, 4, None]], 1, padding)
    assert mask.shape == (1, 1, 11, 11) and mask.dtype == torch.bool
    expected = mask_rows(
        "111 111 111 00",  # [CLS]
        "011 100 000 00",  # w0 -> w0, w1
        "011 110 000 00",  # w1a -> w0, w1, w2
        "011 110 000 00",  # w1b
        "001 111 100 00",  # w2 -> w1, w2, w3
        "000 011 110 00",  # w3a -> w2, w3, w4
        "000 011 110 00",  # w3b
        "000 001 110 00",  # w4 -> w3, w4
        "111 111 111 00",  # [SEP]
        "000 000 000 10",  # padding
        "000 000 000 01",
    )
    assert torch.equal(mask[0, 0], expected)


def test_window_mask_zero_none_and_causal():
    """k = 0 keeps the pieces of a word together; None lets words see all words (never the specials); causal
    cuts everything right of the diagonal. Shorter lists are padded to the longest one."""
    word_ids = [[None, 0, 0, 1, None], [None, 0, None]]
    zero = window_mask(word_ids, 0)
    assert torch.equal(zero[0, 0], mask_rows("11111", "01100", "01100", "00010", "11111"))
    assert torch.equal(zero[1, 0], mask_rows("11100", "01000", "11100", "00010", "00001"))
    assert torch.equal(window_mask(word_ids, None)[0, 0], mask_rows("11111", "01110", "01110", "01110", "11111"))
    causal = window_mask([[0, 1, 2, 3]], 1, causal=True)
    assert torch.equal(causal[0, 0], mask_rows("1000", "1100", "0110", "0011"))


def test_a_zero_in_the_padding_mask_makes_a_position_padding():
    mask = window_mask([[None, 0, 1, None]], None, torch.tensor([[1, 1, 0, 1]]))
    assert torch.equal(mask[0, 0], mask_rows("1101", "0100", "0010", "1101"))


def test_mask_forms_for_eager_and_sdpa():
    """sdpa reads a boolean mask; eager adds the mask to the scores, so it gets 0 and the dtype's minimum."""
    allowed = window_mask([WORD_IDS], 1)
    assert torch.equal(as_model_mask(allowed, tiny_bert("sdpa")), allowed)
    additive = as_model_mask(allowed, tiny_bert("eager"))
    assert additive.dtype == torch.float32
    assert torch.equal(additive == 0, allowed)
    assert (additive[~allowed] == torch.finfo(torch.float32).min).all()


# --- what a windowed model's hidden states depend on ----------------------------------------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("window", [0, 1, 2])
def test_a_word_depends_only_on_the_words_in_its_window(implementation, window):
    """Replacing one piece of each word in turn: layer l of a word moves iff the replaced word is at most
    l * k words away; [CLS] and [SEP] see every change; nothing else moves."""
    model = tiny_bert(implementation)
    base = [2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3]
    positions = [1, 2, 4, 5, 6, 8, 9]  # the first piece of each word
    ids = variants(base, positions, range(5, VOCAB))
    padding = torch.ones_like(ids)
    mask = model_attention_mask(model, [WORD_IDS] * len(ids), window, padding)
    assert mask.shape == (len(ids), 1, 11, 11)
    states = hidden_states(model, ids, mask)
    assert torch.equal(changed(states), expected_changes(WORD_IDS, positions, window, layers=4))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_words_never_see_the_special_tokens(implementation):
    """Replacing [CLS] or [SEP] changes the special tokens only, at every layer."""
    model = tiny_bert(implementation)
    ids = variants([2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3], [0, 10], range(2, VOCAB))
    states = hidden_states(model, ids, model_attention_mask(model, [WORD_IDS] * 3, 1, torch.ones_like(ids)))
    assert torch.equal(changed(states), expected_changes(WORD_IDS, [0, 10], 1, layers=4))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("window", [0, 1, 2, None])
def test_padding_never_changes_the_outputs(implementation, window):
    """The sentence alone, and padded with two different fillers: the same states at every real position."""
    model = tiny_bert(implementation)
    sentence = [2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3]
    alone = torch.tensor([sentence])
    alone_states = hidden_states(model, alone, model_attention_mask(model, [WORD_IDS], window, torch.ones_like(alone)))
    padded = torch.tensor([sentence + [0, 0, 0], sentence + [30, 31, 32]])
    padding = torch.tensor([[1] * 11 + [0] * 3] * 2)
    padded_states = hidden_states(model, padded, model_attention_mask(model, [WORD_IDS] * 2, window, padding))
    torch.testing.assert_close(padded_states[:, 0, :11], padded_states[:, 1, :11], rtol=0, atol=1e-6)
    torch.testing.assert_close(padded_states[:, 0, :11], alone_states[:, 0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_no_window_is_the_plain_model_and_a_full_4d_mask_reproduces_it(implementation):
    """window None hands the model its own padding mask; a 4-D mask allowing every real pair, in the form built
    for the implementation, gives the plain model's states (so the eager mask is additive, not 0/1)."""
    model = tiny_bert(implementation)
    ids = torch.tensor([[2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3], [2, 20, 21, 22, 3, 0, 0, 0, 0, 0, 0]])
    padding = torch.tensor([[1] * 11, [1] * 5 + [0] * 6])
    assert model_attention_mask(model, [WORD_IDS, [None, 0, 1, 2, None]], None, padding) is padding
    plain = hidden_states(model, ids, padding)
    real = padding.bool()
    full = (real[:, None, :, None] & real[:, None, None, :]) | torch.eye(11, dtype=torch.bool)
    four_d = hidden_states(model, ids, as_model_mask(full, model))
    torch.testing.assert_close(four_d[:, 0], plain[:, 0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(four_d[:, 1, :5], plain[:, 1, :5], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_gpt2_keeps_its_causality_and_sees_k_words_to_the_left(implementation):
    model = tiny_gpt2(implementation)
    assert check_window_support(model) is True
    word_ids = list(range(8))
    positions = list(range(8))
    ids = variants(list(range(10, 18)), positions, range(1, VOCAB))
    mask = model_attention_mask(model, [word_ids] * len(ids), 1, torch.ones_like(ids), causal=True)
    states = hidden_states(model, ids, mask)
    assert torch.equal(changed(states), expected_changes(word_ids, positions, 1, layers=4, causal=True))


def test_causality_and_mask_support_are_detected_by_running_the_model():
    for implementation in IMPLEMENTATIONS:
        assert check_window_support(tiny_bert(implementation)) is False
        assert check_window_support(tiny_bert(implementation, is_decoder=True)) is True
        torch.manual_seed(0)
        roberta = RobertaModel(RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=64,
                                             attn_implementation=implementation)).eval()
        assert check_window_support(roberta) is False


class MaskIgnoringBert(BertModel):
    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        return super().forward(input_ids=input_ids, **kwargs)


def test_a_model_that_ignores_the_mask_or_cannot_take_one_is_refused():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, attn_implementation="sdpa")
    with pytest.raises(ConfigError, match="does not obey a 4-D attention mask.*Fix: features.attention_window=null"):
        check_window_support(MaskIgnoringBert(config).eval())
    flash = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"))
    with pytest.raises(ConfigError, match="needs the eager or sdpa attention.*'flash_attention_2'"):
        check_window_support(flash)


def test_minilm_obeys_the_window(minilm_path):
    model = AutoModel.from_pretrained(minilm_path).eval()
    assert check_window_support(model) is False
    base = [101, 2023, 2003, 1037, 3231, 6251, 2007, 2070, 2616, 2182, 102]
    positions = [1, 2, 4, 5, 6, 8, 9]
    ids = variants(base, positions, range(1996, 7000))
    states = hidden_states(model, ids, model_attention_mask(model, [WORD_IDS] * len(ids), 1, torch.ones_like(ids)))
    assert torch.equal(changed(states), expected_changes(WORD_IDS, positions, 1, layers=7))


# --- the encoder option, its store and its config -----------------------------------------------------------


@pytest.mark.parametrize("value", [-1, 1.5, True, "2", [1]])
def test_a_bad_window_is_refused_before_the_model_is_loaded(value):
    with pytest.raises(ConfigError, match=r"features.attention_window=.* is not an attention window\. Fix: "):
        WordEncoder("/nonexistent/model", attention_window=value)


def test_good_windows_are_kept():
    assert [parse_attention_window(value) for value in (None, 0, 3)] == [None, 0, 3]
    with pytest.raises(ModelLoadError):  # a valid window gets as far as loading
        WordEncoder("/nonexistent/model", attention_window=2)


def record(sentence: str, target: int) -> WordInContext:
    tokens = tuple(sentence.split(" "))
    return WordInContext(tokens, (target,), tokens[target], "cls", "test:1")


@pytest.fixture(scope="module")
def encoders(tiny_bert_path):
    return {window: WordEncoder(str(tiny_bert_path), attention_window=window) for window in (None, 0, 1)}


def test_window_zero_isolates_the_target_from_its_context(encoders):
    """Same target pieces at the same positions, other context words: identical with k = 0 at every layer,
    different with full attention from layer 1 on (layer 0, the embeddings, never sees the context)."""
    records = [record("she eats airheads .", 2), record("a juice airheads ,", 2)]
    isolated = encoders[0].encode(encoders[0].prepare_many(records))
    torch.testing.assert_close(isolated[0], isolated[1], rtol=0, atol=1e-6)
    full = encoders[None].encode(encoders[None].prepare_many(records))
    torch.testing.assert_close(full[:, 0], isolated[:, 0], rtol=0, atol=1e-6)
    assert not torch.allclose(full[0, 1:], full[1, 1:], atol=1e-3)
    assert not torch.allclose(full[0, 1:], isolated[0, 1:], atol=1e-3)


def test_encoder_features_match_an_eager_model_with_a_mask_from_the_tokenizer(encoders, tiny_bert_path):
    """The encoder (sdpa, batched and padded) against each record alone through an eager model, its mask built
    from a plain tokenizer call's word_ids()."""
    encoder = encoders[1]
    records = [record("she eats airheads .", 2), record("new york city is healthy", 1), record("the oak", 1)]
    prepared = encoder.prepare_many(records)
    assert prepared[0].word_ids == [None, 0, 1, 2, 2, 2, 3, None]
    vectors = encoder.encode(prepared)
    eager = AutoModel.from_pretrained(tiny_bert_path, attn_implementation="eager").eval()
    for row, (one, inputs) in enumerate(zip(records, prepared)):
        tokens = encoder.tokenizer(list(one.tokens), is_split_into_words=True)
        assert tokens["input_ids"] == inputs.input_ids
        mask = as_model_mask(window_mask([tokens.word_ids()], 1), eager)
        states = hidden_states(eager, torch.tensor([tokens["input_ids"]]), mask)[:, 0]
        expected = states[:, inputs.target_pieces].mean(dim=1)
        torch.testing.assert_close(vectors[row], expected, rtol=1e-5, atol=1e-5)


def test_window_goes_into_the_store_name_and_metadata(encoders, tmp_path):
    full, zero = encoders[None], encoders[0]
    assert "attention_window" not in full.store_metadata()  # stores written before the option stay valid
    assert zero.store_metadata()["attention_window"] == 0
    assert {key: value for key, value in zero.store_metadata().items() if key != "attention_window"} == \
        full.store_metadata()
    assert (full.store_kind, zero.store_kind, encoders[1].store_kind) == ("mean", "mean.attn-0", "mean.attn-1")
    paths = [store_path(tmp_path, e.store_name, "data", "train", e.store_kind, e.context_size, "ab" * 32)
             for e in (full, zero)]
    assert paths[0].name == "train.mean.ctx-all.ababababab.h5"
    assert paths[1].name == "train.mean.attn-0.ctx-all.ababababab.h5"


def test_a_store_of_another_window_is_refused(encoders, tmp_path):
    records = [record("she eats airheads .", 2), record("the oak", 1)]
    path = tmp_path / "s.h5"
    extract_split(records, encoders[None], path, class_names=["cls"], progress=False)
    with pytest.raises(StoreMismatchError, match="attention_window: store has '<missing>', request has 0"):
        extract_split(records, encoders[0], path, class_names=["cls"], progress=False)
    windowed = tmp_path / "w.h5"
    extract_split(records, encoders[0], windowed, class_names=["cls"], progress=False)
    with pytest.raises(StoreMismatchError, match="attention_window: store has 0, request has 1"):
        extract_split(records, encoders[1], windowed, class_names=["cls"], progress=False)


def test_config_passes_the_window_to_the_encoder(tiny_bert_path, tmp_path):
    cfg = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path), "features.attention_window=1")
    assert build(cfg.features.encoder, "features.encoder").attention_window == 1
    default = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path))
    assert default.features.attention_window is None
    bad = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path), "features.attention_window=-2")
    with pytest.raises(ConfigError, match="features.attention_window=-2"):
        build(bad.features.encoder, "features.encoder")
