"""One hidden state of an encoder, read or edited inside its forward pass: a forward hook on the module whose output
is hidden state ℓ (0: the `embeddings` module, ℓ >= 1: transformer block ℓ), so that the layers above run on the edited
states (amnesic probing: probing.finetune.amnesic). The edit applies to every position; a module whose output is not
the hidden state the model reports is refused (docs/erasure.md, "Amnesic probing", says why and how it is tested).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from probing.errors import ConfigError

Edit = Callable[[Tensor], Tensor]


def hidden_state_module(model: PreTrainedModel, layer: int) -> nn.Module:
    """The module of `model` (a base model: BertModel, not BertForMaskedLM) whose output is hidden state `layer`."""
    if layer == 0:
        embeddings = getattr(model, "embeddings", None)
        if not isinstance(embeddings, nn.Module):
            raise ConfigError(f"layer=0: {type(model).__name__} has no embedding module whose output is hidden state "
                              "0, so it cannot be edited there. Fix: layer=1 or above")
        return embeddings
    blocks = transformer_blocks(model)
    return blocks[layer - 1]


def transformer_blocks(model: PreTrainedModel) -> nn.ModuleList:
    """The list of the model's `num_hidden_layers` transformer blocks, in order."""
    count = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ConfigError(f"{type(model).__name__} has no list of its {count} transformer layers, so no layer of it can "
                      "be edited. Fix: a BERT-like encoder (BERT, RoBERTa, MiniLM, ELECTRA, ...)")


def _first(output: Any) -> Tensor:
    """The hidden states in a module's output: the output itself, or the first item of a tuple."""
    return output[0] if isinstance(output, tuple) else output


def _replaced(output: Any, states: Tensor) -> Any:
    return (states, *output[1:]) if isinstance(output, tuple) else states


@contextmanager
def edited_hidden_state(model: PreTrainedModel, layer: int, edit: Edit | None) -> Iterator[None]:
    """Within the block, hidden state `layer` of every forward pass of `model` is `edit(hidden state)`; None edits
    nothing (the unedited model, run through the same code)."""
    if edit is None:
        yield
        return

    def hook(module: nn.Module, inputs: Any, output: Any) -> Any:
        return _replaced(output, edit(_first(output)))

    handle = hidden_state_module(model, layer).register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def captured_hidden_state(model: PreTrainedModel, layer: int) -> Iterator[list[Tensor]]:
    """Within the block, hidden state `layer` of each forward pass of `model` is appended to the list yielded, as
    the module hands it to the layers above (after any edit registered before)."""
    captured: list[Tensor] = []

    def hook(module: nn.Module, inputs: Any, output: Any) -> None:
        captured.append(_first(output).detach())

    handle = hidden_state_module(model, layer).register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def check_hidden_state_module(model: PreTrainedModel, layer: int, reported: Tensor, captured: Tensor,
                              model_name: str) -> None:
    """Refuse a `layer` whose module output (`captured`) is not the hidden state the model reports (`reported`,
    `output.hidden_states[layer]` of the same forward pass)."""
    if reported.shape != captured.shape or not torch.allclose(reported, captured, rtol=1e-4, atol=1e-5):
        module = type(hidden_state_module(model, layer)).__name__
        raise ConfigError(f"layer={layer}: the output of {model_name}'s {module} is not its hidden state {layer} (the "
                          "model transforms it before reporting it), so an edit there would not be an edit of hidden "
                          f"state {layer}. Fix: another layer (e.g. layer={layer - 1})")
