"""What a lens reads of a causal LM: the residual stream after each block (layer 0 = the embedding output, L = the
last block's output before the final norm), and the model's own readout of it (the final norm, the unembedding and
Gemma-2's logit soft-capping where the config has one), so that the top layer read by the lens is the model's own
next-token prediction. Which models qualify (`is_causal_lm`) is decided from their config, before any weight loads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

# The names Hugging Face gives a decoder's final norm: Llama, Qwen2, Gemma (norm), GPT-2 (ln_f), GPT-NeoX
# (final_layer_norm), others (final_norm).
FINAL_NORMS = ("norm", "ln_f", "final_layer_norm", "final_norm")


def is_causal_lm(config: PretrainedConfig) -> bool:
    """Whether `config` is a causal LM's: an architecture with a causal-LM head and no masked-LM one (Llama, GPT-2,
    GPT-NeoX, ...), or a model of both kinds configured as a decoder (a BERT with is_decoder=true)."""
    if getattr(config, "is_encoder_decoder", False):
        return False
    model_type = getattr(config, "model_type", None)
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return True
    return bool(getattr(config, "is_decoder", False)) and model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


@dataclass
class Readout:
    """The model's readout of a residual stream (..., d) into next-token logits (..., V): `norm`, then `unembed`,
    then tanh soft-capping at `softcap` (None: none)."""

    norm: nn.Module
    unembed: nn.Module
    softcap: float | None = None

    @classmethod
    def of(cls, model: PreTrainedModel) -> Readout:
        base = model.base_model
        norm = next((getattr(base, name) for name in FINAL_NORMS if isinstance(getattr(base, name, None), nn.Module)),
                    None)
        unembed = model.get_output_embeddings()
        if norm is None or unembed is None:
            raise TypeError(f"{type(model).__name__} has no final norm ({', '.join(FINAL_NORMS)}) or no unembedding")
        return cls(norm, unembed, getattr(model.config, "final_logit_softcapping", None))

    def __call__(self, residual: Tensor) -> Tensor:
        logits = self.unembed(self.norm(residual))
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


@dataclass
class Forward:
    """One batch through the model: the residual stream of every layer 0..L (each (B, T, d)) and the model's own
    next-token logits (B, T, V)."""

    residuals: list[Tensor]
    logits: Tensor


@contextmanager
def final_norm_input(norm: nn.Module) -> Iterator[list[Tensor]]:
    """While open, each input of `norm` (a copy: the model may reuse its storage) is appended to the list yielded."""
    inputs: list[Tensor] = []
    handle = norm.register_forward_hook(lambda module, args, output: inputs.append(args[0].detach().clone()))
    try:
        yield inputs
    finally:
        handle.remove()


@torch.no_grad()
def run_model(model: PreTrainedModel, readout: Readout, input_ids: Tensor, attention_mask: Tensor) -> Forward:
    """The hidden states 0..L-1 of Hugging Face's output_hidden_states (the embedding output, then each block's output
    before the final norm), layer L captured at the input of the final norm (Hugging Face's last hidden state is
    after it), and the model's logits, computed by the model itself."""
    with final_norm_input(readout.norm) as top:
        output = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    if len(top) != 1:
        raise RuntimeError(f"the final norm of {type(model).__name__} ran {len(top)} times in one forward pass")
    return Forward([*output.hidden_states[:-1], top[0]], output.logits)
