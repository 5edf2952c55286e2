"""All binary s-class probes of Zhao et al. 2020 as one batched module.

Each probe k is the paper's "1-layer MLP with 1024 hidden dimensions and ReLU" (§4.1) with two output
logits (A.2): Linear(D, H) -> ReLU -> Linear(H, 2). The C probes are independent: they share no
parameters, so one forward/backward over the stacked weights gives every probe exactly the gradient it
would get if it were trained on its own.
"""

from __future__ import annotations

import torch

from probing.probes.components.word_probes import BatchedWordProbes


class BatchedBinaryMLPs(BatchedWordProbes):
    """C independent binary MLP probes with stacked parameters: `BatchedWordProbes` with C heads of the mlp1 family
    and two labels (the layout of its products, and why, is described there).

    Parameters, probe k's `nn.Linear` weights and biases stacked on dim 0:
      w1 (C, H, D), b1 (C, H), w2 (C, 2, H), b2 (C, 2),
    each probe initialised exactly as two fresh `nn.Linear` layers (probe 0's two layers first, then probe 1's, ...).

    Dropout (off by default, as in the paper) is applied to the hidden layer, independently per probe.
    """

    def __init__(self, num_probes: int, input_dim: int, hidden_dim: int = 1024, dropout: float = 0.0):
        super().__init__(num_probes, input_dim, 2, "mlp1", hidden_dim, dropout=dropout)

    @property
    def num_probes(self) -> int:
        return self.num_heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, D) -> logits (B, C, 2); logits[:, k] are probe k's (negative, positive) scores."""
        if x.dim() != 2:
            raise ValueError(f"expected features of shape (batch, {self.input_dim}), got {tuple(x.shape)}")
        return super().forward(x)
