"""Editing one hidden state inside the forward pass: the layers below are untouched, the edited layer hands on
edit(its output), the layers above run on the edited states (checked against running them by hand), and a layer
whose module output is not the reported hidden state is refused."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer, BertModel, GPT2Config, GPT2Model

from probing.erasure.hidden_state import (
    captured_hidden_state,
    check_hidden_state_module,
    edited_hidden_state,
    hidden_state_module,
)
from probing.errors import ConfigError


@pytest.fixture(scope="module")
def tiny(tiny_bert_path):
    model = BertModel.from_pretrained(tiny_bert_path, output_hidden_states=True).eval()
    inputs = AutoTokenizer.from_pretrained(tiny_bert_path)("she eats a healthy apple in new york", return_tensors="pt")
    return model, inputs


def edit(states: torch.Tensor) -> torch.Tensor:
    """An affine edit that no layer would make by chance."""
    return 0.5 * states.flip(-1) + 1.0


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_only_the_named_layer_changes_and_it_hands_on_the_edited_states(tiny, layer):
    model, inputs = tiny
    with torch.no_grad():
        plain = model(**inputs).hidden_states
        with edited_hidden_state(model, layer, edit), captured_hidden_state(model, layer) as handed_on:
            edited = model(**inputs)
    for below in range(layer):
        assert torch.equal(edited.hidden_states[below], plain[below])
    assert torch.equal(handed_on[0], edit(plain[layer]))
    states = edit(plain[layer])
    with torch.no_grad():
        for block in model.encoder.layer[layer:]:  # the layers above, run by hand on the edited states
            states = block(states)
            states = states[0] if isinstance(states, tuple) else states
    assert torch.allclose(edited.last_hidden_state, states, atol=1e-5)
    assert not torch.allclose(edited.last_hidden_state, plain[-1], atol=1e-3)


def test_the_hook_is_gone_after_the_block_and_none_edits_nothing(tiny):
    model, inputs = tiny
    with torch.no_grad():
        plain = model(**inputs).last_hidden_state
        with edited_hidden_state(model, 1, None):
            unedited = model(**inputs).last_hidden_state
        with edited_hidden_state(model, 1, edit):
            model(**inputs)
        after = model(**inputs).last_hidden_state
    assert torch.equal(unedited, plain) and torch.equal(after, plain)


def test_the_modules_of_hidden_states_are_the_embeddings_and_the_transformer_blocks(tiny):
    model, _ = tiny
    assert hidden_state_module(model, 0) is model.embeddings
    assert [hidden_state_module(model, layer) for layer in (1, 2)] == list(model.encoder.layer)


def test_a_module_whose_output_is_not_the_reported_hidden_state_is_refused():
    """GPT-2 reports its top hidden state after its final layer norm, not as its last block hands it on; and it has
    no single module whose output is hidden state 0."""
    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(vocab_size=20, n_positions=16, n_embd=16, n_layer=2, n_head=2)).eval()
    inputs = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad(), captured_hidden_state(model, 2) as captured:
        reported = model(inputs, output_hidden_states=True).hidden_states
    check_hidden_state_module(model, 1, reported[1], reported[1], "gpt2")
    with pytest.raises(ConfigError, match=r"layer=2: the output of gpt2's GPT2Block is not its hidden state 2 .* "
                                          r"Fix: another layer \(e.g. layer=1\)"):
        check_hidden_state_module(model, 2, reported[2], captured[0], "gpt2")
    with pytest.raises(ConfigError, match="layer=0: GPT2Model has no embedding module .* Fix: layer=1 or above"):
        hidden_state_module(model, 0)
