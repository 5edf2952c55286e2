"""Several independent probes of one family as one batched module (every probe of every task): the families of
Hewitt & Liang (2019) §4 (`probing.probes.components.families`), each reading an example's vector (a word's, or a
pair's, built upstream as [a; b] or [a; b; a * b]) and giving K logits.

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch
from torch import Tensor, nn

from probing.errors import ConfigError, setting


class Family(Protocol):
    """What batched probes read of their family (`probing.probes.components.families.ProbeFamily`)."""

    name: str
    hidden_dim: int
    rank: int | None
    dropout: float
    l1: float
    l2: float

    @property
    def linear(self) -> bool: ...

    def layer_sizes(self, input_dim: int, num_labels: int) -> list[int]: ...


def check_rank_within(rank: int | None, input_dim: int) -> None:
    """The rank of the probe family (the argument `family`, its setting `rank`) at most the feature dimension D: a
    rank of D or more leaves a D-dimensional linear map unconstrained, so it would be recorded as a constraint that
    never applied."""
    if rank is not None and rank > input_dim:
        key = setting("family.rank")
        raise ConfigError(f"{key}={rank} exceeds the feature dimension {input_dim} of this representation; a rank of "
                          f"{input_dim} or more constrains nothing. Fix: {key}<={input_dim}, or {key}=null")


def first_layer_products(weight: Tensor, x: Tensor, hidden_grad: Tensor) -> tuple[Tensor, Tensor]:
    """The two big products of a training step of P probes, alone, in `BatchedProbes`' layout: the first layer's
    forward W1 · xᵀ, (P, H, D) x (D, B), and its weight gradient G · x, (P, H, B) x (B, D); 4·P·H·D·B FLOPs. What
    the benches time as the machine's limit for a step."""
    probes = len(weight)
    return (torch.bmm(weight, x.T.contiguous().expand(probes, *x.T.shape)),
            torch.bmm(hidden_grad, x.expand(probes, *x.shape)))


class BatchedProbes(nn.Module):
    """`num_heads` independent multi-class probes of one family (a `Family`) with stacked parameters.

    Layer j of head h is the `nn.Linear` with weight w{j}[h] (out, in) and bias b{j}[h] (out); all layers have a
    bias, the two factors of a rank-constrained linear probe included (Hewitt & Liang's code: two `nn.Linear`). Each
    head is initialised exactly as fresh `nn.Linear` layers would be, head 0's layers first (`reset_parameters`).

    Dropout (the family's `dropout`, off by default) where Hewitt & Liang's code puts it, except on an MLP's input: on
    the input of a linear probe (rank-constrained or not; nothing else to drop), on each hidden layer (after the ReLU)
    of an MLP.
    Their code drops an MLP's input too; we do not, so that the first layer of all heads stays one shared product.
    Masks are drawn independently per head.

    With `input_mask` (heads, D) bool, head h reads only the inputs where its row is true: its first layer's weight is
    multiplied by the row wherever it is used (forward, penalty, `as_sequential`), so the other inputs neither change
    its logits nor get a gradient (their weights stay 0: Adam moves no weight whose gradient is always 0), and its
    first layer is initialised as a fresh `nn.Linear(k_h, out)` on its k_h kept inputs would be. Trained with the
    same batches, such a head is the probe trained alone on those columns (tests/probes/test_neurons.py).

    Each layer of all heads is ONE batched product over the head axis, with the examples as columns: layer j maps
    (heads, in, B) to (heads, out, B) as w{j} (heads, out, in) @ (heads, in, B) + b{j}, starting from the input as
    (D, B), shared by every head (or (heads, D, B), one input per head: per-head scalar mixes, a linear probe's
    per-head input dropout). In this layout every operand of the step, gradients included, is contiguous in its
    natural shape (the weights' gradients come out as (heads, out, in), as fused Adam wants them), a first layer runs
    as fast as one wide (B, heads*H) product or faster (26 s-class probes on MiniLM, CPU: 1.1x in fp32, 1.03x in bf16),
    and a small output layer costs its own FLOPs only (after one wide product it is a block-diagonal product, 2·heads/D
    of the first layer's FLOPs for 2 logits; bench/probe.py).
    """

    def __init__(self, num_heads: int, input_dim: int, num_labels: int, family: Family,
                 input_mask: Tensor | None = None):
        super().__init__()
        if num_heads < 1 or input_dim < 1 or num_labels < 1:
            raise ValueError(f"num_heads, input_dim and num_labels must be >= 1, got {num_heads}, {input_dim}, "
                             f"{num_labels}")
        check_rank_within(family.rank, input_dim)
        self.num_heads, self.input_dim, self.num_labels = num_heads, input_dim, num_labels
        self.family, self.hidden_dim, self.rank = family, family.hidden_dim, family.rank
        self.l1, self.l2 = family.l1, family.l2
        self.sizes = family.layer_sizes(input_dim, num_labels)
        for j, (fan_in, fan_out) in enumerate(zip(self.sizes, self.sizes[1:]), start=1):
            self.register_parameter(f"w{j}", nn.Parameter(torch.empty(num_heads, fan_out, fan_in)))
            self.register_parameter(f"b{j}", nn.Parameter(torch.empty(num_heads, fan_out)))
        self.register_buffer("input_mask", checked_mask(input_mask, num_heads, input_dim))
        self.dropout = nn.Dropout(family.dropout)
        self.reset_parameters()

    @property
    def num_layers(self) -> int:
        return len(self.sizes) - 1

    def layers(self) -> list[tuple[nn.Parameter, nn.Parameter]]:
        """(weight (heads, out, in), bias (heads, out)) of each layer, input side first: the parameters themselves."""
        return [(getattr(self, f"w{j}"), getattr(self, f"b{j}")) for j in range(1, self.num_layers + 1)]

    def applied_layers(self) -> list[tuple[Tensor, Tensor]]:
        """`layers()` as the heads apply them: with an input mask, the first weight times each head's mask."""
        layers = self.layers()
        if self.input_mask is None:
            return layers
        (weight, bias), *rest = layers
        return [(weight * self.input_mask[:, None, :].to(weight.dtype), bias), *rest]

    def penalty(self) -> Tensor | float:
        """The elastic-net terms of all heads, summed (`head_penalties`); 0.0 when l1 = l2 = 0 (nothing computed)."""
        return self.head_penalties().sum() if self.l1 or self.l2 else 0.0

    def head_penalties(self) -> Tensor:
        """(heads,): each head's elastic-net term, l1 * sum |W| + l2 * ||W||_F summed over its weight matrices (as
        applied: a masked head's dropped inputs count nothing)."""
        total = self.w1.new_zeros(self.num_heads)
        for applied, _ in self.applied_layers():
            flat = applied.flatten(1)
            if self.l1:
                total = total + self.l1 * flat.abs().sum(dim=1)
            if self.l2:
                total = total + self.l2 * torch.linalg.vector_norm(flat, dim=1)
        return total

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise every head exactly as fresh `nn.Linear` layers would be (kaiming-uniform weights with
        a=sqrt(5), uniform(+-1/sqrt(fan_in)) biases), drawn in the order of building head 0's layers, then head
        1's, ...; a masked head's first layer as `nn.Linear(k_h, out)` on its k_h kept inputs (0 elsewhere)."""
        for h in range(self.num_heads):
            for j, (weight, bias) in enumerate(self.layers()):
                kept = None if j or self.input_mask is None else self.input_mask[h].nonzero().flatten()
                fresh = nn.Linear(weight.shape[2] if kept is None else len(kept), weight.shape[1])
                if kept is None:
                    weight[h].copy_(fresh.weight)
                else:
                    weight[h].zero_()
                    weight[h][:, kept] = fresh.weight.to(weight)
                bias[h].copy_(fresh.bias)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, D), shared by all heads, or (heads, B, D), one input per head -> logits (B, heads, K)."""
        per_head = x.dim() == 3
        expected = (self.num_heads, x.shape[-2], self.input_dim) if per_head else (x.shape[0], self.input_dim)
        if x.dim() not in (2, 3) or tuple(x.shape) != expected:
            raise ValueError(f"expected features of shape (batch, {self.input_dim}) or ({self.num_heads}, batch, "
                             f"{self.input_dim}), got {tuple(x.shape)}")
        if self.family.linear and self.training and self.dropout.p > 0:
            x = self.dropout(x if per_head else x.expand(self.num_heads, *x.shape))  # a mask per head
        # examples as columns: (D, B) once for every head, or (heads, D, B)
        hidden = x.T.contiguous().expand(self.num_heads, *x.T.shape) if x.dim() == 2 else x.transpose(1, 2)
        bias_after = x.device.type == "cpu" and (self.w1.dtype in (torch.bfloat16, torch.float16)
                                                 or torch.is_autocast_enabled("cpu"))
        for j, (weight, bias) in enumerate(self.applied_layers()):
            if j and not self.family.linear:
                # in place: the product before needs its inputs for backward, not its output
                hidden = self.dropout(hidden.relu_())
            hidden = self.affine(weight, bias, hidden, bias_after)  # (heads, out, B)
        return hidden.permute(2, 0, 1)

    @staticmethod
    def affine(weight: Tensor, bias: Tensor, hidden: Tensor, bias_after: bool) -> Tensor:
        """weight (heads, out, in) @ hidden (heads, in, B) + bias (heads, out) for all heads in one product. The bias
        is the product's own addend (baddbmm: free in float32, and on a GPU), except with `bias_after` (bf16 or fp16 on
        a CPU, whose baddbmm then adds it in a pass that costs twice an in-place add after the product: 4.5% of a bf16
        step of 26 MiniLM s-class probes, bench/probe.py): there it is added after, in the product's dtype (a float32
        bias would take a slower mixed-dtype path)."""
        if not bias_after:
            return torch.baddbmm(bias.unsqueeze(-1), weight, hidden)
        product = torch.bmm(weight, hidden)
        return product.add_(bias.to(product.dtype).unsqueeze(-1))

    def as_sequential(self, head: int, kept_inputs: bool = False) -> nn.Sequential:
        """Head `head` as a standalone nn.Sequential with copied weights: [Dropout ->] Linear [-> Linear] for the
        linear family, Linear -> ReLU [-> Dropout] -> ... -> Linear for the MLPs (Dropout only with dropout > 0).
        With `kept_inputs`, a masked head's first Linear reads only its kept inputs, in index order."""
        if not 0 <= head < self.num_heads:
            raise IndexError(f"head {head} out of range for {self.num_heads} heads")
        modules: list[nn.Module] = []
        drop = [nn.Dropout(self.dropout.p)] if self.dropout.p > 0 else []
        if self.family.linear:
            modules += drop
        for j, (weight, bias) in enumerate(self.applied_layers()):
            if j == 0 and kept_inputs and self.input_mask is not None:
                weight = weight[:, :, self.input_mask[head]]
            if j and not self.family.linear:
                modules += [nn.ReLU(), *drop]
            linear = nn.utils.skip_init(nn.Linear, weight.shape[2], weight.shape[1], device=weight.device,
                                        dtype=weight.dtype)
            with torch.no_grad():
                linear.weight.copy_(weight[head])
                linear.bias.copy_(bias[head])
            modules.append(linear)
        return nn.Sequential(*modules)

    def state_of_heads(self) -> dict[str, Tensor]:
        """A detached copy of every parameter, heads on dim 0 (for `copy_heads_`)."""
        return {name: parameter.detach().clone() for name, parameter in self.named_parameters()}

    @torch.no_grad()
    def copy_heads_(self, state: Mapping[str, Tensor], heads: Tensor) -> None:
        """Load the parameters of the heads selected by `heads` (bool (num_heads,) or indices) from `state` (as
        `state_of_heads` gives it); the other heads keep theirs."""
        for name, parameter in self.named_parameters():
            parameter[heads] = state[name].to(parameter)[heads]

    def extra_repr(self) -> str:
        rank = f", rank={self.rank}" if self.rank is not None else ""
        penalty = f", l1={self.l1}, l2={self.l2}" if self.l1 or self.l2 else ""
        masked = ", input_mask" if self.input_mask is not None else ""
        return (f"num_heads={self.num_heads}, family={self.family.name}, sizes={self.sizes}{rank}, "
                f"dropout={self.dropout.p}{penalty}{masked}")


def checked_mask(mask: Tensor | None, num_heads: int, input_dim: int) -> Tensor | None:
    """An input mask as (heads, D) bool, each head keeping at least one input; None stays None."""
    if mask is None:
        return None
    mask = torch.as_tensor(mask, dtype=torch.bool)
    if tuple(mask.shape) != (num_heads, input_dim) or not mask.any(dim=1).all():
        raise ValueError(f"input_mask must be ({num_heads}, {input_dim}) bool with an input kept per head, got "
                         f"shape {tuple(mask.shape)}")
    return mask.clone()
