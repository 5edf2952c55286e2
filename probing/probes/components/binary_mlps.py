"""All binary s-class probes of Zhao et al. 2020 as one batched module.

Each probe k is the paper's "1-layer MLP with 1024 hidden dimensions and ReLU" (§4.1) with two output
logits (A.2): Linear(D, H) -> ReLU -> Linear(H, 2). The C probes are independent: they share no
parameters, so one forward/backward over the stacked weights gives every probe exactly the gradient it
would get if it were trained on its own, while the work runs as two large batched matrix products.
"""

from __future__ import annotations

import torch
from torch import nn


class BatchedBinaryMLPs(nn.Module):
    """C independent binary MLP probes with stacked parameters.

    Parameters (stored input-major, so the forward pass is a plain `x @ w`):
      w1 (C, D, H), b1 (C, H), w2 (C, H, 2), b2 (C, 2).

    Dropout (off by default, as in the paper) is applied to the hidden layer, independently per probe.

    The forward is two batched GEMMs over the probe axis (`baddbmm`, batch index c): probe c's
    (B, D) x (D, H) and (B, H) x (H, 2) products, with the input broadcast to every probe as a stride-0
    view and the hidden layer laid out (C, B, H). Each GEMM reads w1[c] and x in place and writes contiguous
    output, so no step copies or permutes the weights or the hidden layer (an `einsum("bd,cdh->bch")`
    permutes its (C, B, H) result and, backward, its gradient: ~15-20% slower per step on CPU). The returned
    logits (B, C, 2) are a transposed view of the (C, B, 2) result.
    """

    def __init__(self, num_probes: int, input_dim: int, hidden_dim: int = 1024, dropout: float = 0.0):
        super().__init__()
        if num_probes < 1 or input_dim < 1 or hidden_dim < 1:
            raise ValueError(
                f"num_probes, input_dim and hidden_dim must be >= 1, got {num_probes}, {input_dim}, {hidden_dim}"
            )
        self.num_probes, self.input_dim, self.hidden_dim = num_probes, input_dim, hidden_dim
        self.w1 = nn.Parameter(torch.empty(num_probes, input_dim, hidden_dim))
        self.b1 = nn.Parameter(torch.empty(num_probes, hidden_dim))
        self.w2 = nn.Parameter(torch.empty(num_probes, hidden_dim, 2))
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
            self.w1[k].copy_(first.weight.T)
            self.b1[k].copy_(first.bias)
            self.w2[k].copy_(second.weight.T)
            self.b2[k].copy_(second.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, D) -> logits (B, C, 2); logits[:, k] are probe k's (negative, positive) scores."""
        if x.dim() != 2 or x.shape[1] != self.input_dim:
            raise ValueError(f"expected features of shape (batch, {self.input_dim}), got {tuple(x.shape)}")
        per_probe_input = x.expand(self.num_probes, *x.shape)  # (C, B, D), a view: no copy of x or of w1
        hidden = torch.relu(torch.baddbmm(self.b1[:, None, :], per_probe_input, self.w1))  # (C, B, H)
        logits = torch.baddbmm(self.b2[:, None, :], self.dropout(hidden), self.w2)  # (C, B, 2)
        return logits.transpose(0, 1)

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
            first.weight.copy_(self.w1[k].T)
            first.bias.copy_(self.b1[k])
            second.weight.copy_(self.w2[k].T)
            second.bias.copy_(self.b2[k])
        middle = [nn.Dropout(self.dropout.p)] if self.dropout.p > 0 else []
        return nn.Sequential(first, nn.ReLU(), *middle, second)

    def extra_repr(self) -> str:
        return f"num_probes={self.num_probes}, input_dim={self.input_dim}, hidden_dim={self.hidden_dim}"
