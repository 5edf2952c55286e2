"""All binary s-class probes of Zhao et al. 2020 as one batched module.

Each probe k is the paper's "1-layer MLP with 1024 hidden dimensions and ReLU" (§4.1) with two output
logits (A.2): Linear(D, H) -> ReLU -> Linear(H, 2). The C probes are independent: they share no
parameters, so one forward/backward over the stacked weights gives every probe exactly the gradient it
would get if it were trained on its own.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class BatchedBinaryMLPs(nn.Module):
    """C independent binary MLP probes with stacked parameters.

    Parameters, probe k's `nn.Linear` weights and biases stacked on dim 0:
      w1 (C, H, D), b1 (C, H), w2 (C, 2, H), b2 (C, 2).

    Dropout (off by default, as in the paper) is applied to the hidden layer, independently per probe.

    Every probe reads the same input, so the first layer of all C probes is ONE wide linear layer: w1 viewed as
    (C*H, D) (a view, no copy) gives the hidden layer of every probe as one (B, C*H) matrix, probe k in columns
    k*H..(k+1)*H. The second layer is one linear layer too, with the (2C, C*H) block-diagonal matrix of the w2[k]
    (5.5 MB at C=26, H=1024, built every step). Products with an inner or outer size of 2 (the per-probe `bmm` of
    the second layer and of its gradients) run far below GEMM speed on CPU, and the per-probe layout (C, B, H)
    needs permuting copies of the hidden layer; each block-diagonal product costs 2C/D of a first-layer product's
    FLOPs (~14% for MiniLM) but runs at GEMM speed, and every tensor of the step, gradients included, stays in its
    natural contiguous layout (which fused Adam needs to be fast: it copies strided parameters).
    """

    def __init__(self, num_probes: int, input_dim: int, hidden_dim: int = 1024, dropout: float = 0.0):
        super().__init__()
        if num_probes < 1 or input_dim < 1 or hidden_dim < 1:
            raise ValueError(
                f"num_probes, input_dim and hidden_dim must be >= 1, got {num_probes}, {input_dim}, {hidden_dim}"
            )
        self.num_probes, self.input_dim, self.hidden_dim = num_probes, input_dim, hidden_dim
        self.w1 = nn.Parameter(torch.empty(num_probes, hidden_dim, input_dim))
        self.b1 = nn.Parameter(torch.empty(num_probes, hidden_dim))
        self.w2 = nn.Parameter(torch.empty(num_probes, 2, hidden_dim))
        self.b2 = nn.Parameter(torch.empty(num_probes, 2))
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise every probe exactly as two fresh `nn.Linear` layers would be.

        (kaiming-uniform weights with a=sqrt(5), uniform(+-1/sqrt(fan_in)) biases; the random numbers are
        drawn in the same order as building probe 0's two layers, then probe 1's, ...)
        """
        for k in range(self.num_probes):
            first, second = nn.Linear(self.input_dim, self.hidden_dim), nn.Linear(self.hidden_dim, 2)
            self.w1[k].copy_(first.weight)
            self.b1[k].copy_(first.bias)
            self.w2[k].copy_(second.weight)
            self.b2[k].copy_(second.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, D) -> logits (B, C, 2); logits[:, k] are probe k's (negative, positive) scores."""
        if x.dim() != 2 or x.shape[1] != self.input_dim:
            raise ValueError(f"expected features of shape (batch, {self.input_dim}), got {tuple(x.shape)}")
        wide = self.num_probes * self.hidden_dim
        # in place: the first layer's backward needs x and w1, not its output
        hidden = F.linear(x, self.w1.view(wide, self.input_dim), self.b1.view(wide)).relu_()
        logits = F.linear(self.dropout(hidden), block_diagonal(self.w2), self.b2.view(-1))  # (B, 2C)
        return logits.view(x.shape[0], self.num_probes, 2)

    def as_sequential(self, k: int) -> nn.Sequential:
        """Probe k as a standalone Linear -> ReLU -> [Dropout ->] Linear with copied weights.

        The Dropout layer is present only when the module was built with dropout > 0.
        """
        if not 0 <= k < self.num_probes:
            raise IndexError(f"probe {k} out of range for {self.num_probes} probes")
        placement = {"device": self.w1.device, "dtype": self.w1.dtype}
        first = nn.utils.skip_init(nn.Linear, self.input_dim, self.hidden_dim, **placement)
        second = nn.utils.skip_init(nn.Linear, self.hidden_dim, 2, **placement)
        with torch.no_grad():
            first.weight.copy_(self.w1[k])
            first.bias.copy_(self.b1[k])
            second.weight.copy_(self.w2[k])
            second.bias.copy_(self.b2[k])
        middle = [nn.Dropout(self.dropout.p)] if self.dropout.p > 0 else []
        return nn.Sequential(first, nn.ReLU(), *middle, second)

    def extra_repr(self) -> str:
        return f"num_probes={self.num_probes}, input_dim={self.input_dim}, hidden_dim={self.hidden_dim}"


def block_diagonal(blocks: torch.Tensor) -> torch.Tensor:
    """(C, R, N) -> (C*R, C*N) with blocks[k] at rows k*R.., columns k*N.., zeros elsewhere (differentiable)."""
    count, rows, cols = blocks.shape
    out = blocks.new_zeros(count, rows, count, cols)
    diagonal = torch.arange(count, device=blocks.device)
    out[diagonal, :, diagonal, :] = blocks
    return out.view(count * rows, count * cols)
