"""The ELMo scalar mix (Peters et al. 2018, Eq. 1): a learned, softmax-weighted sum of all encoder layers.

See docs/probing.md, 'What is probed: layers, the scalar mix, baselines'.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from probing.data.settings import require_bool, require_number
from probing.errors import ConfigError


def _tiny_value_of_dtype(dtype: torch.dtype) -> float:
    """The variance epsilon allennlp uses (`allennlp.nn.util.tiny_value_of_dtype`): 1e-13, or 1e-4 in half."""
    return 1e-4 if dtype in (torch.float16, torch.bfloat16) else 1e-13


def masked_layer_norm(layers: Tensor, mask: Tensor | None) -> Tensor:
    """Normalise each layer to mean 0 / variance 1 over its unmasked elements (allennlp `_do_layer_norm`).

    layers (L, *batch, D), mask bool (*batch) or None (= all unmasked). Per layer j there is ONE mean and ONE
    (biased) variance, taken over every unmasked position and every one of the D features; each element becomes
    (h - mean_j) / sqrt(var_j + eps). Masked positions are normalised with the same statistics but never enter
    them (`torch.where`, so even inf/nan padding cannot leak in). With no unmasked element at all the count is
    clamped to 1 so that the (then meaningless, all-padding) output stays finite instead of NaN.
    """
    if mask is None:
        mask = torch.ones(layers.shape[1:-1], dtype=torch.bool, device=layers.device)
    eps = _tiny_value_of_dtype(layers.dtype)
    # half-precision sums over N x D elements overflow, so the statistics are taken in float32
    work = layers.float() if layers.dtype in (torch.float16, torch.bfloat16) else layers
    keep = mask.unsqueeze(0).unsqueeze(-1)
    reduce_dims = tuple(range(1, work.dim()))
    count = (mask.sum() * work.shape[-1]).clamp(min=1).to(work.dtype)
    mean = torch.where(keep, work, 0.0).sum(dim=reduce_dims, keepdim=True) / count
    centered = work - mean
    variance = torch.where(keep, centered, 0.0).square().sum(dim=reduce_dims, keepdim=True) / count
    return (centered / torch.sqrt(variance + eps)).to(layers.dtype)


class ScalarMix(nn.Module):
    """gamma * sum_j softmax(w)_j * h_j over ALL layers of the encoder, the embedding output (layer 0) included.

    Input `layers` is (num_layers, *batch, D) with layer 0 first, i.e. num_layers = L + 1 for an L-layer encoder
    (Peters' R_k = {h_{k,0}, ..., h_{k,L}} where h_{k,0} is the token layer). Output is (*batch, D).

    Dropout: `nn.Dropout(dropout)` on the mixed output, Peters' "dropout to ELMo" (§3.3); allennlp's `Elmo` does
    the same on the output of its (dropout-free) `ScalarMix`. The other common variant, UDify's
    `ScalarMixWithDropout` (Kondratyuk & Straka 2019), instead drops whole layer weights (sets w_j to -inf before
    the softmax). We keep output dropout because it is what the paper describes and it leaves the weights that
    are reported (`normalized_weights`) the same ones that are used at training time.

    With `trainable=False` both w and gamma are frozen (allennlp semantics), e.g. a fixed average of the layers.
    """

    def __init__(
        self,
        num_layers: int,
        layer_norm: bool = False,
        dropout: float = 0.0,
        l2_lambda: float = 0.0,
        initial_weights: Sequence[float] | None = None,
        trainable: bool = True,
    ):
        super().__init__()
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ConfigError(f"ScalarMix needs num_layers >= 1, got {num_layers!r}. Fix: mix the layers of a store "
                              "that holds every layer (layer=mix)")
        l2_lambda = require_number("probe.mix.l2_lambda", l2_lambda, example="0.001")
        dropout = require_number("probe.mix.dropout", dropout, high=1.0, example="0.1")
        layer_norm = require_bool("probe.mix.layer_norm", layer_norm)
        if initial_weights is None:
            initial_weights = [0.0] * num_layers
        if len(initial_weights) != num_layers:
            raise ConfigError(
                f"ScalarMix initial_weights has {len(initial_weights)} values but num_layers is {num_layers}. "
                "Fix: give one pre-softmax weight per layer (embedding layer included)"
            )
        self.num_layers, self.layer_norm, self.l2_lambda = num_layers, layer_norm, float(l2_lambda)
        self.weights = nn.Parameter(torch.tensor([float(w) for w in initial_weights]), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.tensor(1.0), requires_grad=trainable)
        self.dropout = nn.Dropout(dropout)

    def forward(self, layers: Tensor, mask: Tensor | None = None) -> Tensor:
        """layers (num_layers, *batch, D), mask bool (*batch) of unmasked positions or None -> (*batch, D).

        The mask only matters for the layer-norm statistics; masked positions still get a (meaningless) output.
        """
        self._check_inputs(layers, mask)
        if mask is not None:
            mask = mask.to(torch.bool)
        if self.layer_norm:
            layers = masked_layer_norm(layers, mask)
        weights = torch.softmax(self.weights, dim=0).to(layers.dtype)
        mixed = self.gamma.to(layers.dtype) * torch.tensordot(weights, layers, dims=1)
        return self.dropout(mixed)

    def _check_inputs(self, layers: Tensor, mask: Tensor | None) -> None:
        if layers.dim() < 2 or layers.shape[0] != self.num_layers:
            got = layers.shape[0] if layers.dim() >= 1 else "a 0-dim tensor"
            raise ValueError(
                f"ScalarMix expected {self.num_layers} layers stacked on dim 0 (shape (num_layers, *batch, D)), "
                f"got {got} (input shape {tuple(layers.shape)})"
            )
        if mask is not None and tuple(mask.shape) != tuple(layers.shape[1:-1]):
            raise ValueError(
                f"ScalarMix mask shape {tuple(mask.shape)} does not match the batch dims "
                f"{tuple(layers.shape[1:-1])} of layers {tuple(layers.shape)}"
            )

    def normalized_weights(self) -> Tensor:
        """softmax(w), detached from the graph: the layer weights s_j to report (layer 0 first)."""
        return torch.softmax(self.weights.detach(), dim=0)

    def center_of_gravity(self) -> float:
        """sum_j j * s_j: the expected layer under the mix weights (Tenney et al. 2019, "BERT Rediscovers the Classical
        NLP Pipeline", §3), 0 = the embedding layer."""
        weights = self.normalized_weights()
        return float((torch.arange(len(weights), dtype=weights.dtype, device=weights.device) * weights).sum())

    def summary(self) -> dict:
        """What results.json reports of a learned mix: its softmax weights (layer 0 first), gamma and center of
        gravity."""
        return {"mix_weights": self.normalized_weights().tolist(), "gamma": float(self.gamma.detach()),
                "center_of_gravity": self.center_of_gravity()}

    def l2_penalty(self) -> Tensor:
        """l2_lambda * sum_j w_j^2 on the PRE-softmax weights (bilm-tf `_l2_regularizer`), a 0-dim tensor.

        Pulling w towards 0 pulls softmax(w) towards the uniform average of the layers (Peters §3.3/§5.1).
        Add it to the training loss; it is 0 when l2_lambda is 0.
        """
        return self.l2_lambda * self.weights.square().sum()

    def parameter_group(self, lr: float | None = None) -> dict:
        """An optimizer parameter group for w and gamma with its own lr (the optimizer's when None) and NO weight
        decay.

        The only regulariser on w is the explicit `l2_penalty` (Peters), and decaying gamma would shrink the whole
        representation, so the probe's generic weight decay must not reach these two parameters.
        """
        group = {"params": [self.weights, self.gamma], "weight_decay": 0.0}
        return group if lr is None else {**group, "lr": lr}

    def extra_repr(self) -> str:
        return (
            f"num_layers={self.num_layers}, layer_norm={self.layer_norm}, dropout={self.dropout.p}, "
            f"l2_lambda={self.l2_lambda}, trainable={self.weights.requires_grad}"
        )
