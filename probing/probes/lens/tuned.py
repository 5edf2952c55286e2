"""The tuned lens (Belrose et al. 2023, "Eliciting Latent Predictions from Transformers with the Tuned Lens"): one
affine map per layer below the top, h -> h + A h + b with A = 0 and b = 0 at the start (the identity: the logit
lens), trained through Lightning's Trainer to minimise KL(final layer's next-token distribution || the lens's).

See docs/lens.md, 'Choices where the paper leaves room'.
"""

from __future__ import annotations

import logging

import lightning as L
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from probing.errors import ProbingError
from probing.probes.lens.readout import Readout, run_model

log = logging.getLogger(__name__)


class TunedLens(nn.Module):
    """`num_layers` hidden states 0..L of width `width`: a translator (d x d and a bias, both zero: the identity) for
    each layer 0..L-1; layer L is read as it is (the model's own prediction needs none)."""

    def __init__(self, num_layers: int, width: int):
        super().__init__()
        self.translators = nn.ModuleList(nn.Linear(width, width) for _ in range(num_layers - 1))
        for translator in self.translators:
            nn.init.zeros_(translator.weight)
            nn.init.zeros_(translator.bias)

    def forward(self, residual: Tensor, layer: int) -> Tensor:
        """The residual stream of `layer` moved to where the readout expects the top layer's."""
        if layer == len(self.translators):
            return residual
        return residual + self.translators[layer](residual)


def kl_nats(final_log_probs: Tensor, log_probs: Tensor) -> Tensor:
    """KL(p || q) per row in nats, of the log-probabilities (N, V) of p (the final layer) and q (a lens)."""
    return (final_log_probs.exp() * (final_log_probs - log_probs)).sum(dim=-1)


class TunedLensTraining(L.LightningModule):
    """Fits `lens` on batches of token ids (input_ids, attention_mask) through the frozen causal LM `model` (read by
    `readout`): per batch, one backward pass per layer (only one layer's (tokens, V) logits alive at a time), the
    gradient clipped to norm `clip`, then one step of SGD with Nesterov momentum `momentum` at `lr` (decayed linearly
    to 0 over `total_steps`) and weight decay `weight_decay`. The mean training KL of each layer is kept by epoch."""

    def __init__(self, model: nn.Module, readout: Readout, lens: TunedLens, lr: float, momentum: float,
                 weight_decay: float, clip: float, total_steps: int):
        super().__init__()
        self.automatic_optimization = False
        self.lens = lens
        # not registered as submodules: the frozen model stays out of the optimizer, the checkpoint and the summary
        self.frozen = (model, readout)
        self.lr, self.momentum, self.weight_decay, self.clip = lr, momentum, weight_decay, clip
        self.total_steps = total_steps
        self.epoch_kl: list[list[float]] = []
        self._sums: Tensor | None = None
        self._count = 0

    def on_fit_start(self) -> None:
        self.frozen[0].to(self.device)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        model, readout = self.frozen
        forward = run_model(model, readout, batch["input_ids"], batch["attention_mask"])
        predicted = next_token_positions(batch["attention_mask"])
        final = F.log_softmax(forward.logits[predicted].float(), dim=-1)
        optimizer = self.optimizers()
        optimizer.zero_grad()
        losses = torch.zeros(len(self.lens.translators), dtype=torch.float64)
        for layer in range(len(self.lens.translators)):
            residual = forward.residuals[layer][predicted]
            log_probs = F.log_softmax(readout(self.lens(residual, layer)).float(), dim=-1)
            loss = kl_nats(final, log_probs).mean()
            if not loss.isfinite():
                raise ProbingError(f"the tuned lens's training loss at layer {layer} became {float(loss.detach())} "
                                   f"at epoch {self.current_epoch}. Fix: lower the learning rate (lr)")
            self.manual_backward(loss)
            losses[layer] = float(loss.detach())
        self.clip_gradients(optimizer, gradient_clip_val=self.clip, gradient_clip_algorithm="norm")
        optimizer.step()
        self.lr_schedulers().step()
        tokens = int(predicted.sum())
        self._sums = losses * tokens + (0 if self._sums is None else self._sums)
        self._count += tokens
        self.log("kl_nats", losses.mean().item(), prog_bar=True, batch_size=tokens)

    def on_train_epoch_end(self) -> None:
        if self._sums is not None:
            self.epoch_kl.append((self._sums / max(self._count, 1)).tolist())
        self._sums, self._count = None, 0

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.lens.parameters(), lr=self.lr, momentum=self.momentum, nesterov=True,
                                    weight_decay=self.weight_decay)
        decay = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: max(0.0, 1.0 - step / max(self.total_steps, 1)))
        return [optimizer], [decay]


def next_token_positions(attention_mask: Tensor) -> Tensor:
    """(B, T) bool: the positions whose next position holds a token (right padding): those that predict one."""
    predicted = torch.zeros_like(attention_mask, dtype=torch.bool)
    predicted[:, :-1] = attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()
    return predicted


def fit(training: TunedLensTraining, batches: DataLoader, epochs: int, device: torch.device) -> None:
    """Train for `epochs` on one `device`, with a progress bar (the analysis logs its results itself)."""
    trainer = L.Trainer(max_epochs=epochs, accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=True,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(training, train_dataloaders=batches)
