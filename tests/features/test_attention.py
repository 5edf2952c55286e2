"""Attention windows: the mask entry by entry under each policy for the special tokens, what a windowed model's
hidden states depend on (eager and sdpa, BERT, GPT-2, MiniLM), padding, full attention from a wide enough positional
window, the encoder option, its store and its config."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModel, BertConfig, BertModel, GPT2Config, GPT2Model, RobertaConfig, RobertaModel

from probing.data.records import WordInContext
from probing.errors import ConfigError, ModelLoadError, StoreMismatchError
from probing.features.attention import (
    DEFAULT_POLICY,
    POLICIES,
    as_model_mask,
    check_window_support,
    model_attention_mask,
    parse_attention_policy,
    parse_attention_window,
    window_mask,
    window_policy,
)
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split
from probing.features.featurizers import built_featurizer
from probing.features.sentence_store import sentence_encoder_of
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
    moves by more than 2e-6 but less than 1e-5 fails the test (neither clearly changed nor the same: eager
    attention over a batch differs from row to row by up to ~1e-6, depending on the CPU's kernels)."""
    difference = (states[:, 1:] - states[:, :1]).abs().amax(dim=-1).permute(1, 0, 2)
    assert not ((difference > 2e-6) & (difference <= 1e-5)).any(), "a change too small to call either way"
    return difference > 1e-5


def expected_changes(word_ids: list[int | None], positions: list[int], window: int, layers: int,
                     causal: bool = False, policy: str = "blocked") -> torch.Tensor:
    """(variants, layers, T) bool, computed from the rules: the embedding output (layer 0) changes at the replaced
    position only; the output of layer l of a word changes iff the replaced word is at most l * window words away
    (and not to its right in a causal model). Special tokens: `blocked`, they see every change from layer 1 on and
    no word sees them; `positional`, they are words at -1 (leading) and n (trailing) under the same rule; `sink`,
    every word sees them from layer 1 on and they see nothing but themselves."""
    words = [word for word in word_ids if word is not None]
    place = [(-1 if p == 0 else max(words) + 1) if word is None else word for p, word in enumerate(word_ids)]
    expected = torch.zeros(len(positions), layers, len(word_ids), dtype=torch.bool)
    for v, position in enumerate(positions):
        expected[v, 0, position] = True
        source = word_ids[position]
        for layer in range(1, layers):
            for p, word in enumerate(word_ids):
                if policy == "positional":
                    distance = place[p] - place[position]
                    expected[v, layer, p] = abs(distance) <= layer * window and (distance >= 0 or not causal)
                elif word is None or source is None:
                    sink_sees = policy == "sink" and word is not None
                    expected[v, layer, p] = p == position or (word is None if policy == "blocked" else sink_sees)
                else:
                    distance = word - source
                    expected[v, layer, p] = abs(distance) <= layer * window and (distance >= 0 or not causal)
    return expected


# --- the mask, entry by entry -------------------------------------------------------------------------------


# [CLS] w0 w1a w1b w2 [SEP] pad: three words, the middle one in two pieces, then one padding position
THREE_WORDS = [None, 0, 1, 1, 2, None]
THREE_WORDS_PADDING = torch.tensor([[1] * 6 + [0]])
# Each policy's mask of THREE_WORDS by hand, k = 0 and k = 1 (row: query, column: key; padding sees itself only).
BY_HAND = {
    ("positional", 0): ("100000 0",  # [CLS] (position -1) -> itself
                        "010000 0",  # w0 -> w0
                        "001100 0",  # w1a -> w1 (both pieces)
                        "001100 0",  # w1b
                        "000010 0",  # w2 -> w2
                        "000001 0",  # [SEP] (position 3) -> itself
                        "000000 1"),
    ("positional", 1): ("110000 0",  # [CLS] -> [CLS], w0
                        "111100 0",  # w0 -> [CLS], w0, w1
                        "011110 0",  # w1a -> w0, w1, w2
                        "011110 0",  # w1b
                        "001111 0",  # w2 -> w1, w2, [SEP]
                        "000011 0",  # [SEP] -> w2, [SEP]
                        "000000 1"),
    ("sink", 0): ("100000 0",  # [CLS] -> itself only
                  "110001 0",  # w0 -> [CLS], w0, [SEP]
                  "101101 0",  # w1a -> [CLS], w1, [SEP]
                  "101101 0",
                  "100011 0",  # w2 -> [CLS], w2, [SEP]
                  "000001 0",  # [SEP] -> itself only
                  "000000 1"),
    ("sink", 1): ("100000 0",
                  "111101 0",  # w0 -> [CLS], w0, w1, [SEP]
                  "111111 0",  # w1a -> everything real
                  "111111 0",
                  "101111 0",  # w2 -> [CLS], w1, w2, [SEP]
                  "000001 0",
                  "000000 1"),
    ("blocked", 0): ("111111 0",  # [CLS] -> every real token
                     "010000 0",  # w0 -> w0
                     "001100 0",
                     "001100 0",
                     "000010 0",
                     "111111 0",  # [SEP] -> every real token
                     "000000 1"),
    ("blocked", 1): ("111111 0",
                     "011100 0",  # w0 -> w0, w1
                     "011110 0",  # w1a -> w0, w1, w2
                     "011110 0",
                     "001110 0",  # w2 -> w1, w2
                     "111111 0",
                     "000000 1"),
}


@pytest.mark.parametrize("policy,window", sorted(BY_HAND))
def test_each_policy_masks_three_words_as_written_by_hand(policy, window):
    mask = window_mask([THREE_WORDS], window, THREE_WORDS_PADDING, policy=policy)
    assert mask.shape == (1, 1, 7, 7) and mask.dtype == torch.bool
    assert torch.equal(mask[0, 0], mask_rows(*BY_HAND[policy, window]))


def test_the_default_policy_is_sink():
    assert DEFAULT_POLICY == "sink" and set(POLICIES) == {"positional", "sink", "blocked"}
    assert torch.equal(window_mask([THREE_WORDS], 1, THREE_WORDS_PADDING),
                       window_mask([THREE_WORDS], 1, THREE_WORDS_PADDING, policy="sink"))


def test_a_positional_window_is_full_attention_from_n_plus_1_words():
    """Three words: [CLS] (-1) and [SEP] (3) are 4 apart, so k = 3 leaves out only the pair of them and k >= 4
    allows every real pair; blocked and sink never do."""
    real = mask_rows("111111 0", "111111 0", "111111 0", "111111 0", "111111 0", "111111 0", "000000 1")
    for window in (4, 5, 100):
        assert torch.equal(window_mask([THREE_WORDS], window, THREE_WORDS_PADDING, policy="positional")[0, 0], real)
    three = window_mask([THREE_WORDS], 3, THREE_WORDS_PADDING, policy="positional")[0, 0]
    left_out = torch.zeros(7, 7, dtype=torch.bool)
    left_out[0, 5] = left_out[5, 0] = True
    assert torch.equal(real & ~three, left_out) and not (three & ~real).any()
    for policy in ("blocked", "sink"):
        assert not torch.equal(window_mask([THREE_WORDS], 100, THREE_WORDS_PADDING, policy=policy)[0, 0], real)


def test_positional_specials_stand_beside_the_first_and_last_words_the_encoder_sees():
    """A sentence cut to words 10-11 (a long sentence centred on its target): [CLS] stands at 9, [SEP] at 12."""
    mask = window_mask([[None, 10, 11, None]], 1, policy="positional")
    assert torch.equal(mask[0, 0], mask_rows("1100", "1110", "0111", "0011"))


def test_window_mask_by_hand():
    """blocked: [CLS] w0 w1a w1b w2 w3a w3b w4 [SEP] pad pad, k = 1: words see the words at most one away, specials
    see every real token and are seen by specials only, padding sees itself only and is seen by nobody else."""
    padding = torch.tensor([[1] * 9 + [0, 0]])
    mask = window_mask([[None, 0, 1, 1, 2, 3, 3, 4, None]], 1, padding, policy="blocked")
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
    """blocked: k = 0 keeps the pieces of a word together; None lets words see all words (never the specials);
    causal cuts everything right of the diagonal. Shorter lists are padded to the longest one."""
    word_ids = [[None, 0, 0, 1, None], [None, 0, None]]
    zero = window_mask(word_ids, 0, policy="blocked")
    assert torch.equal(zero[0, 0], mask_rows("11111", "01100", "01100", "00010", "11111"))
    assert torch.equal(zero[1, 0], mask_rows("11100", "01000", "11100", "00010", "00001"))
    assert torch.equal(window_mask(word_ids, None, policy="blocked")[0, 0],
                       mask_rows("11111", "01110", "01110", "01110", "11111"))
    causal = window_mask([[0, 1, 2, 3]], 1, causal=True)
    assert torch.equal(causal[0, 0], mask_rows("1000", "1100", "0110", "0011"))


def test_a_zero_in_the_padding_mask_makes_a_position_padding():
    padding = torch.tensor([[1, 1, 0, 1]])
    assert torch.equal(window_mask([[None, 0, 1, None]], None, padding, policy="blocked")[0, 0],
                       mask_rows("1101", "0100", "0010", "1101"))
    assert torch.equal(window_mask([[None, 0, 1, None]], None, padding, policy="sink")[0, 0],
                       mask_rows("1000", "1101", "0010", "0001"))
    assert torch.equal(window_mask([[None, 0, 1, None]], 0, padding, policy="positional")[0, 0],
                       mask_rows("1000", "0100", "0010", "0001"))


def test_mask_forms_for_eager_and_sdpa():
    """sdpa reads a boolean mask; eager adds the mask to the scores, so it gets 0 and the dtype's minimum."""
    allowed = window_mask([WORD_IDS], 1)
    assert torch.equal(as_model_mask(allowed, tiny_bert("sdpa")), allowed)
    additive = as_model_mask(allowed, tiny_bert("eager"))
    assert additive.dtype == torch.float32
    assert torch.equal(additive == 0, allowed)
    assert (additive[~allowed] == torch.finfo(torch.float32).min).all()


# --- what a windowed model's hidden states depend on ----------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("window", [0, 1, 2])
def test_a_word_depends_only_on_the_words_in_its_window(implementation, window, policy):
    """Replacing one piece of each word in turn: layer l of a word moves iff the replaced word is at most
    l * k words away; the special tokens move as their policy says (blocked: they see every change; positional:
    as words at -1 and 7; sink: never); nothing else moves."""
    model = tiny_bert(implementation)
    base = [2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3]
    positions = [1, 2, 4, 5, 6, 8, 9]  # the first piece of each word
    ids = variants(base, positions, range(5, VOCAB))
    padding = torch.ones_like(ids)
    mask = model_attention_mask(model, [WORD_IDS] * len(ids), window, padding, policy=policy)
    assert mask.shape == (len(ids), 1, 11, 11)
    states = hidden_states(model, ids, mask)
    assert torch.equal(changed(states), expected_changes(WORD_IDS, positions, window, layers=4, policy=policy))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_what_sees_the_special_tokens(implementation, policy):
    """Replacing [CLS] or [SEP]: blocked, the special tokens alone move, at every layer; positional, the words
    within l * k of positions -1 and 7 move too; sink, every word moves from layer 1 on."""
    model = tiny_bert(implementation)
    ids = variants([2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3], [0, 10], range(2, VOCAB))
    mask = model_attention_mask(model, [WORD_IDS] * 3, 1, torch.ones_like(ids), policy=policy)
    states = hidden_states(model, ids, mask)
    assert torch.equal(changed(states), expected_changes(WORD_IDS, [0, 10], 1, layers=4, policy=policy))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("window", [0, 1, 2, None])
def test_padding_never_changes_the_outputs(implementation, window, policy):
    """The sentence alone, and padded with two different fillers: the same states at every real position."""
    model = tiny_bert(implementation)
    sentence = [2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3]
    alone = torch.tensor([sentence])
    alone_mask = model_attention_mask(model, [WORD_IDS], window, torch.ones_like(alone), policy=policy)
    alone_states = hidden_states(model, alone, alone_mask)
    padded = torch.tensor([sentence + [0, 0, 0], sentence + [30, 31, 32]])
    padding = torch.tensor([[1] * 11 + [0] * 3] * 2)
    padded_mask = model_attention_mask(model, [WORD_IDS] * 2, window, padding, policy=policy)
    padded_states = hidden_states(model, padded, padded_mask)
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
def test_a_positional_window_of_n_plus_1_words_is_exactly_the_plain_model(implementation):
    """Seven words and three words, padded: positional k = 8 (and more) gives the plain model's hidden states bit
    for bit at every layer; k = 7 does not ([CLS] and [SEP] of the seven words are 8 apart), nor do blocked and
    sink, whatever their k (their specials keep out of the words' view, or the words out of theirs)."""
    model = tiny_bert(implementation)
    ids = torch.tensor([[2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3], [2, 20, 21, 22, 3, 0, 0, 0, 0, 0, 0]])
    padding = torch.tensor([[1] * 11, [1] * 5 + [0] * 6])
    word_ids = [WORD_IDS, [None, 0, 1, 2, None]]
    plain = hidden_states(model, ids, padding)

    def windowed(window: int, policy: str) -> torch.Tensor:
        return hidden_states(model, ids, model_attention_mask(model, word_ids, window, padding, policy=policy))

    for window in (8, 9, 1000):
        states = windowed(window, "positional")
        assert torch.equal(states[:, 0], plain[:, 0]) and torch.equal(states[:, 1, :5], plain[:, 1, :5])
    assert not torch.equal(windowed(7, "positional")[:, 0], plain[:, 0])
    assert torch.equal(windowed(7, "positional")[:, 1, :5], plain[:, 1, :5])  # three words: k = 7 >= 4
    for policy in ("blocked", "sink"):
        states = windowed(1000, policy)
        assert (states[1:, 0] - plain[1:, 0]).abs().amax() > 1e-2
        assert (states[1:, 1, :5] - plain[1:, 1, :5]).abs().amax() > 1e-2


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


@pytest.mark.parametrize("policy", POLICIES)
def test_minilm_obeys_the_window(minilm_path, policy):
    model = AutoModel.from_pretrained(minilm_path).eval()
    assert check_window_support(model) is False
    base = [101, 2023, 2003, 1037, 3231, 6251, 2007, 2070, 2616, 2182, 102]
    positions = [1, 2, 4, 5, 6, 8, 9]
    ids = variants(base, positions, range(1996, 7000))
    mask = model_attention_mask(model, [WORD_IDS] * len(ids), 1, torch.ones_like(ids), policy=policy)
    states = hidden_states(model, ids, mask)
    assert torch.equal(changed(states), expected_changes(WORD_IDS, positions, 1, layers=7, policy=policy))


# --- the encoder option, its store and its config -----------------------------------------------------------


@pytest.mark.parametrize("value", [-1, 1.5, True, "2", [1]])
def test_a_bad_window_is_refused_before_the_model_is_loaded(value):
    with pytest.raises(ConfigError, match=r"features.attention_window=.* is not an attention window\. Fix: "):
        WordEncoder("/nonexistent/model", attention_window=value)


def test_good_windows_are_kept():
    assert [parse_attention_window(value) for value in (None, 0, 3)] == [None, 0, 3]
    with pytest.raises(ModelLoadError):  # a valid window gets as far as loading
        WordEncoder("/nonexistent/model", attention_window=2)


@pytest.mark.parametrize("value", ["Positional", "none", None, 1, ["sink"]])
def test_a_bad_policy_is_refused_before_the_model_is_loaded(value):
    with pytest.raises(ConfigError, match=r"features.attention_policy=.* is not an attention policy\. Fix: "
                                          r"features.attention_policy=sink .* positional .* blocked"):
        WordEncoder("/nonexistent/model", attention_window=2, attention_policy=value)
    with pytest.raises(ConfigError, match=r"finetune.attention_policy=.* is not an attention policy"):
        parse_attention_policy(value, "finetune.attention_policy")


def test_the_recorded_policy_is_none_without_a_window():
    assert [parse_attention_policy(policy) for policy in POLICIES] == list(POLICIES)
    assert window_policy(None, "sink") is None and window_policy(0, "sink") == "sink"
    assert window_policy(3) == DEFAULT_POLICY
    with pytest.raises(ConfigError, match="features.attention_policy='bogus'"):
        window_policy(None, "bogus")  # checked even where it does not act


def record(sentence: str, target: int) -> WordInContext:
    tokens = tuple(sentence.split(" "))
    return WordInContext(tokens, (target,), tokens[target], "cls", "test:1")


@pytest.fixture(scope="module")
def encoders(tiny_bert_path):
    built = {window: WordEncoder(str(tiny_bert_path), attention_window=window) for window in (None, 0, 1, 1000)}
    built |= {(window, policy): WordEncoder(str(tiny_bert_path), attention_window=window, attention_policy=policy)
              for window in (0, 1000) for policy in ("positional", "blocked")}
    return built


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


def test_a_positional_window_wider_than_the_sentences_gives_the_features_of_no_window(encoders):
    """The encoder (sdpa, batched, padded) with k = 1000: the same vectors as without a window, bit for bit; with
    blocked or sink, other vectors from layer 1 on (by little: this tiny BERT's attention is nearly uniform)."""
    records = [record("she eats airheads .", 2), record("new york city is healthy", 1), record("the oak", 1)]
    full = encoders[None].encode(encoders[None].prepare_many(records))
    positional = encoders[1000, "positional"]
    assert torch.equal(positional.encode(positional.prepare_many(records)), full)
    for encoder in (encoders[1000, "blocked"], encoders[1000]):  # blocked, sink
        other = encoder.encode(encoder.prepare_many(records))
        torch.testing.assert_close(other[:, 0], full[:, 0], rtol=0, atol=1e-6)
        assert (other[:, 1:] - full[:, 1:]).abs().amax() > 1e-5


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


def test_window_and_policy_go_into_the_store_name_and_metadata(encoders, tmp_path):
    full, zero = encoders[None], encoders[0]
    # stores written before the options stay valid: no window, no policy in name or metadata
    assert "attention_window" not in full.store_metadata() and "attention_policy" not in full.store_metadata()
    assert zero.store_metadata()["attention_window"] == 0
    assert zero.store_metadata()["attention_policy"] == "sink"
    assert encoders[0, "positional"].store_metadata()["attention_policy"] == "positional"
    assert {key: value for key, value in zero.store_metadata().items()
            if key not in ("attention_window", "attention_policy")} == full.store_metadata()
    assert (full.store_kind, zero.store_kind, encoders[1].store_kind, encoders[0, "positional"].store_kind,
            encoders[0, "blocked"].store_kind) == ("mean", "mean.attn-0-sink", "mean.attn-1-sink",
                                                   "mean.attn-0-positional", "mean.attn-0-blocked")
    paths = [store_path(tmp_path, e.store_name, "data", "train", e.store_kind, e.context_size, "ab" * 32)
             for e in (full, zero)]
    assert paths[0].name == "train.mean.ctx-all.ababababab.h5"
    assert paths[1].name == "train.mean.attn-0-sink.ctx-all.ababababab.h5"


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
    with pytest.raises(StoreMismatchError, match="attention_policy: store has 'sink', request has 'positional'"):
        extract_split(records, encoders[0, "positional"], windowed, class_names=["cls"], progress=False)


def test_a_windowed_store_written_before_the_policies_is_refused(encoders, tmp_path, monkeypatch):
    """Its windows were blocked, and it does not say so: no policy may take it for its own."""
    records = [record("she eats airheads .", 2), record("the oak", 1)]
    old = tmp_path / "old.h5"
    legacy = {key: value for key, value in encoders[0, "blocked"].store_metadata().items() if key != "attention_policy"}
    monkeypatch.setattr(encoders[0, "blocked"], "store_metadata", lambda: legacy)
    extract_split(records, encoders[0, "blocked"], old, class_names=["cls"], progress=False)
    monkeypatch.undo()
    for encoder in (encoders[0], encoders[0, "blocked"]):
        with pytest.raises(StoreMismatchError, match="attention_policy: store has '<missing>', request has"):
            extract_split(records, encoder, old, class_names=["cls"], progress=False)


def test_config_passes_the_window_to_the_encoder(tiny_bert_path, tmp_path):
    cfg = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path), "features.attention_window=1")
    assert built_featurizer(cfg.features, cfg.model).attention_window == 1
    default = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path))
    assert default.features.attention_window is None
    bad = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path), "features.attention_window=-2")
    with pytest.raises(ConfigError, match="features.attention_window=-2"):
        built_featurizer(bad.features, bad.model)


def test_config_passes_the_policy_to_the_encoder(tiny_bert_path, tmp_path):
    cfg = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path), "features.attention_window=1",
                      "features.attention_policy=positional")
    assert built_featurizer(cfg.features, cfg.model).attention_policy == "positional"
    default = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path), "features.attention_window=1")
    assert default.features.attention_policy == "sink"
    assert built_featurizer(default.features, default.model).attention_policy == "sink"
    bad = compose_job("probe", tmp_path, *tiny_model(tiny_bert_path), "features.attention_policy=bogus")
    with pytest.raises(ConfigError, match="features.attention_policy='bogus' is not an attention policy. Fix: "):
        built_featurizer(bad.features, bad.model)


def test_max_length_and_a_float32_store_are_named_only_off_their_defaults(encoders, tmp_path):
    full = encoders[None]
    short = copy.copy(full)
    short.max_length = 64
    assert (full.store_kind, short.store_kind) == ("mean", "mean.len-64")
    assert sentence_encoder_of(short).store_kind == "mean.every-word.len-64"
    names = [store_path(tmp_path, full.store_name, "data", "train", "mean", None, "ab" * 32, dtype).name
             for dtype in ("float16", "float32")]
    assert names == ["train.mean.ctx-all.ababababab.h5", "train.mean.ctx-all.ababababab.float32.h5"]
