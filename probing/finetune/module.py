"""The fine-tuning LightningModule: a Hugging Face encoder plus a linear head, every parameter trained.

See docs/finetuning.md, 'What it does'.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from probing.data.settings import check_optimizer, require_bool, require_number
from probing.data.task_records import FINETUNING_KINDS, SENTENCE_TASKS
from probing.errors import ConfigError, ProbingError, setting
from probing.features.attention import (
    DEFAULT_POLICY,
    check_window_support,
    model_attention_mask,
    parse_attention_policy,
    parse_attention_window,
    window_policy,
)
from probing.features.hf_models import load_encoder
from probing.finetune.isotropy import mean_pairwise_cosine
from probing.finetune.metrics import IGNORE, dev_metrics

DEFAULT_OPTIMIZER = partial(torch.optim.Adam, lr=5e-5)


class FineTuner(L.LightningModule):
    """Encoder + linear head for a token task (`kind="token"`: batches carry `last_piece` (B, W), the position of
    each word's last wordpiece, PADDING past the last word, and `labels` (B, W) with IGNORE there) or a sentence
    task (`kind="sentence"`: `labels` (B,)). Every batch carries `input_ids`, `attention_mask` and `word_ids` (B, T):
    the word of each wordpiece, SPECIAL for special tokens and PADDING for padding (probing.features.attention)."""

    def __init__(
        self,
        name_or_path: str,
        labels: list[str],
        kind: str,
        metric: str = "accuracy",
        optimizer: Callable[..., torch.optim.Optimizer] = DEFAULT_OPTIMIZER,
        scheduler: Callable[..., Any] | None = None,
        dropout: float = 0.1,
        attention_window: int | None = None,
        attention_policy: str = DEFAULT_POLICY,
        isotropy_reg: float = 0.0,
        isotropy_on_context: bool = False,
        revision: str | None = None,
    ):
        super().__init__()
        check_arguments(kind, dropout, isotropy_reg, isotropy_on_context)
        check_window(kind, attention_window, attention_policy)
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        self.labels, self.kind = list(labels), kind
        check_optimizer(optimizer, "finetune.module.optimizer")
        self.optimizer, self.scheduler = optimizer, scheduler
        self.attention_window, self.attention_policy = attention_window, attention_policy
        self.encoder, self.tokenizer, self.info = load_encoder(name_or_path, revision=revision)
        self.causal = check_window_support(self.encoder) if self.attention_window is not None else False
        self.encoder.requires_grad_(True).train()
        if getattr(self.encoder, "pooler", None) is not None:
            # BERT's pooler (a dense layer over [CLS] for next-sentence prediction) is not on the path to the loss:
            # the head reads the top layer itself. Frozen, it stays as pretrained and DDP finds no unused parameter.
            self.encoder.pooler.requires_grad_(False)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(self.info.hidden_size, len(self.labels))
        self.metrics = nn.ModuleDict(dev_metrics(metric, self.labels))

    @property
    def max_positions(self) -> int | None:
        """The most positions the encoder embeds (None where its config sets no limit); its tokenizer has its own."""
        return getattr(self.encoder.config, "max_position_embeddings", None)

    @property
    def window_policy(self) -> str | None:
        """The attention policy in force: None without a window (the model's own attention, whatever the policy)."""
        return window_policy(self.attention_window, self.attention_policy)

    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(logits, the vectors fed to the head): (B, W, C) and (B, W, H) for token tasks, (B, C) and (B, H) else."""
        mask = batch["attention_mask"]
        if self.attention_window is not None:
            word_ids = [[None if word < 0 else word for word in row] for row in batch["word_ids"].tolist()]
            mask = model_attention_mask(self.encoder, word_ids, self.attention_window, mask, causal=self.causal,
                                        policy=self.attention_policy)
        output = self.encoder(input_ids=batch["input_ids"], attention_mask=mask)
        hidden = output.last_hidden_state
        if self.kind == "token":
            positions = batch["last_piece"].clamp_min(0)
            vectors = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        else:
            vectors = hidden[:, 0]
        return self.head(self.dropout(vectors)), vectors

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits, vectors = self(batch)
        task_loss = F.cross_entropy(logits.flatten(0, -2), batch["labels"].flatten(), ignore_index=IGNORE)
        loss = task_loss
        size = batch["input_ids"].shape[0]
        if self.hparams.isotropy_reg:
            penalty = self.isotropy_penalty(vectors, batch)
            loss = loss + self.hparams.isotropy_reg * penalty
            self.log("train/isotropy", penalty, on_step=True, on_epoch=True, batch_size=size, sync_dist=True)
        if not torch.isfinite(loss):
            raise ProbingError(f"the training loss became {float(loss.detach())} at epoch {self.current_epoch}, step "
                               f"{batch_idx}. Fix: lower finetune.module.optimizer.lr, or train in float32 "
                               "(trainer.precision=32-true)")
        self.log("train/task_loss", task_loss, on_step=True, on_epoch=True, batch_size=size, sync_dist=True)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=size, sync_dist=True)
        return loss

    def isotropy_penalty(self, vectors: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Mean pairwise cosine of the input embeddings (and, with isotropy_on_context, of the batch's vectors)."""
        penalty = mean_pairwise_cosine(self.encoder.get_input_embeddings().weight)
        if self.hparams.isotropy_on_context:
            scored = vectors[batch["labels"] != IGNORE] if self.kind == "token" else vectors
            if scored.shape[0] > 1:
                penalty = penalty + mean_pairwise_cosine(scored)
        return penalty

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        logits, _ = self(batch)
        predictions, labels = logits.argmax(dim=-1), batch["labels"]
        for name, metric in self.metrics.items():
            if name == "accuracy":
                metric.update(predictions.flatten(), labels.flatten())
            else:
                metric.update(predictions, labels)

    def on_validation_epoch_end(self) -> None:
        for name, metric in self.metrics.items():
            self.log(f"dev/{name}", metric.compute(), prog_bar=True, sync_dist=False)
            metric.reset()

    def configure_optimizers(self) -> dict[str, Any]:
        """The optimizer over every parameter; a scheduler (stepped every batch) gets `num_training_steps` when it
        takes it (e.g. transformers.get_linear_schedule_with_warmup)."""
        optimizer = self.optimizer(self.parameters())
        if self.scheduler is None:
            return {"optimizer": optimizer}
        options = {}
        if "num_training_steps" in inspect.signature(self.scheduler).parameters:
            options["num_training_steps"] = self.trainer.estimated_stepping_batches
        scheduler = self.scheduler(optimizer, **options)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def check_arguments(kind: str, dropout: float, isotropy_reg: float, isotropy_on_context: bool) -> None:
    """Refuse the FineTuner's own settings before its encoder is loaded, naming them (`probing.errors.setting`)."""
    if kind not in FINETUNING_KINDS:
        raise ConfigError(f"kind={kind!r} is not a kind of task. Fix: one of {', '.join(FINETUNING_KINDS)}")
    require_number(setting("dropout"), dropout, high=1.0, example="0.1")
    require_number(setting("isotropy_reg"), isotropy_reg, example="0.1 (or 0 for none)")
    require_bool(setting("isotropy_on_context"), isotropy_on_context)


def check_window(kind: str, attention_window: Any, attention_policy: Any) -> None:
    """Refuse an attention window or policy that is not one, and a window for a sentence task."""
    parse_attention_policy(attention_policy, setting("attention_policy"))
    window = parse_attention_window(attention_window, setting("attention_window"))
    if window is not None and kind == "sentence":
        raise ConfigError(f"{setting('attention_window')}={window} restricts attention to nearby words, which Zhao et "
                          "al. (appendix C) apply to word-level tasks only; sentence tasks "
                          f"({', '.join(SENTENCE_TASKS)}) are classified from the whole text. Fix: "
                          f"{setting('attention_window')}=null, or task=pos / task=ner")
