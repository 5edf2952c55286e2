"""The lenses scored on held-out text, batch by batch and layer by layer (one layer's (tokens, V) logits in memory at
a time): the cross-entropy of the actual next token and the KL from the model's own next-token distribution, each
summed in float64 nats and reported in bits per token (nats / ln 2), as the probes' V-information is."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.nn import functional as F
from transformers import PreTrainedModel

from probing.probes.lens.readout import Readout, run_model
from probing.probes.lens.tuned import TunedLens, kl_nats, next_token_positions

LENSES = ("logit_lens", "tuned_lens")


def bits(nats: float) -> float:
    """Nats in bits: / ln 2."""
    return nats / math.log(2)


def cross_entropy_nats(logits: Tensor, targets: Tensor) -> Tensor:
    """The summed cross-entropy in nats (float64) of logits (N, V) against the target ids (N,)."""
    return F.cross_entropy(logits.double(), targets, reduction="sum")


@dataclass
class LensScores:
    """Summed nats by lens and layer (cross-entropy `ce`, `kl` from the final distribution), the model's own summed
    cross-entropy and the tokens scored."""

    num_layers: int
    ce: dict[str, list[float]] = field(default_factory=dict)
    kl: dict[str, list[float]] = field(default_factory=dict)
    model_ce: float = 0.0
    tokens: int = 0

    def __post_init__(self) -> None:
        for lens in LENSES:
            self.ce.setdefault(lens, [0.0] * self.num_layers)
            self.kl.setdefault(lens, [0.0] * self.num_layers)

    def per_token(self) -> dict:
        """Bits per token: one row per layer (`<lens>_bits`, `<lens>_kl_bits`) and the model's own cross-entropy."""
        count = max(self.tokens, 1)
        layers = [{"layer": layer, **{f"{lens}_bits": bits(self.ce[lens][layer] / count) for lens in LENSES},
                   **{f"{lens}_kl_bits": bits(self.kl[lens][layer] / count) for lens in LENSES}}
                  for layer in range(self.num_layers)]
        return {"layers": layers, "model_bits": bits(self.model_ce / count), "tokens": self.tokens}


@torch.no_grad()
def score(model: PreTrainedModel, readout: Readout, lens: TunedLens, batches: Iterable[dict[str, Tensor]],
          device: torch.device) -> LensScores:
    """Both lenses at every layer of `model`, and the model itself, on `batches` of right-padded token ids."""
    lens = lens.to(device).eval()
    scores = LensScores(len(lens.translators) + 1)
    for batch in batches:
        input_ids, attention_mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        forward = run_model(model, readout, input_ids, attention_mask)
        predicted = next_token_positions(attention_mask)
        targets = input_ids[:, 1:][predicted[:, :-1]]
        own = forward.logits[predicted]
        scores.model_ce += float(cross_entropy_nats(own, targets))
        final = F.log_softmax(own.double(), dim=-1)
        del own
        for layer, residual in enumerate(forward.residuals):
            for name in LENSES:
                state = residual[predicted] if name == "logit_lens" else lens(residual[predicted], layer)
                log_probs = F.log_softmax(readout(state).double(), dim=-1)
                scores.ce[name][layer] += float(-log_probs.gather(1, targets[:, None]).sum())
                scores.kl[name][layer] += float(kl_nats(final, log_probs).sum())
        scores.tokens += len(targets)
    return scores
