"""The s-class probe of Zhao et al. 2020 as a LightningModule: C binary probes trained together on frozen features."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from probing.probes.classifier_probe import ClassifierProbe
from probing.probes.components.probe_head import ProbeHead
from probing.probes.metrics import SClassMetrics, TypeLevelMetrics


class SClassProbe(ClassifierProbe):
    """One binary probe per s-class on frozen features (Zhao et al. 2020 §3.2, §4.1, A.2/A.5), built with the keyword
    contract of `ProbeModule`. Zhao's probe is the default family: MLP-1 with 1024 hidden units (`probe=sclass_mlp`);
    `probe=linear`, `mlp1` and `mlp2` give C binary probes of Hewitt & Liang's families instead (ablations).

    level="context": batches {"features", "label", "combination"}; probe k's target is label == k, and each
    split is scored with Zhao's combination-level micro-F1 (SClassMetrics).
    level="type": batches {"features", "targets" (B, C) bool}, one row per word (Fig. 1); probe k's target is
    "k is one of the word's classes", scored by micro-F1 over all word x class decisions (TypeLevelMetrics).

    Training: every probe k sees every training example. The loss is the sum over probes of each probe's mean
    cross-entropy; as the probes share no parameters, each gets exactly the gradient it would get alone.
    Adam, lr 1e-3 (A.5) by default (fused). A non-finite training loss stops the run with a ProbingError (it would
    otherwise train on and score garbage).

    `num_layers`: features are (B, num_layers, D) and an ELMo scalar mix (its options in `mix`: layer_norm,
    dropout, l2_lambda, lr) learns which layers to use; its L2 penalty joins the loss and its weights are logged
    every epoch (mix/weight_<j>, mix/gamma).

    `control=True` trains a second, identical head on the control task (probing.probes.controls; batches then carry
    control_label/control_combination or control_targets) in the same steps. The heads share no parameter, so
    each gets the gradients it would get alone; they do share the random number stream (the control head's
    initialisation comes after the real one's and shifts the later batch shuffles), so a run with the control task
    on is reproducible for its seed but does not repeat the batches of the same run with it off. Each split's
    metrics then gain control_micro_f1, control_context_accuracy, selectivity (micro_f1 - control_micro_f1) and
    selectivity_context_accuracy.

    `mdl_block_ends` (context level, MDL probing, Voita & Titov 2020 §2.2): the online code of the training labels
    as the C binary decisions per context (K = 2, C labels per example, so the uniform code is n * C bits), and of
    the control task's decisions: the prefix probes of its part (`OnlineCodePart.probes`) hold, for each prefix, C
    binary probes of the same family (2C with the control task), trained beside the probes on the `order` batch key,
    each keeping its best-dev weights; `codelength(train_batches)` gives the `mdl` block of results.json.

    Testing scores "test", and "seen" too when the datamodule serves it as a second test dataloader
    (TEST_SPLITS order).
    """

    SCORES = ("micro_f1", "n_combinations", "n_contexts", "selectivity", "control_micro_f1")  # a run's headline scores

    def probe_shape(self) -> tuple[int, int]:
        """C binary probes."""
        return len(self.labels), 2

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @torch.no_grad()
    def predict_positive_prob(self, features: Tensor, head: ProbeHead | None = None) -> Tensor:
        """features -> (B, C) softmax probability of each probe's positive class."""
        return (head or self.probes)(features).softmax(dim=-1)[..., 1]

    def one_hot(self, labels: Tensor) -> Tensor:
        return labels[:, None] == torch.arange(self.num_classes, device=labels.device)

    def probe_loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Sum over the C probes of each probe's mean binary cross-entropy; targets (B, C) bool. One reduction: the
        sum over all B x C decisions, divided by B (a mean per probe, then their sum, is the same number summed in
        another order, with two more operators forward and backward; the gradients are the same floats, 1/B per
        decision)."""
        return F.cross_entropy(logits.flatten(0, 1), targets.long().flatten(), reduction="sum") / targets.shape[0]

    def targets(self, batch: dict, control: bool = False) -> Tensor:
        prefix = "control_" if control else ""
        if self.level == "type":
            return batch[f"{prefix}targets"]
        return self.one_hot(batch[f"{prefix}label"])

    def task_loss(self, logits: Tensor, batch: dict, control: bool) -> Tensor:
        return self.probe_loss(logits, self.targets(batch, control))

    def mdl_targets(self, batch: dict) -> Tensor:
        """(B, C) or (B, 2C) int64: the C binary decisions of each context, then its control decisions."""
        targets = [self.targets(batch)] + ([self.targets(batch, control=True)] if self.has_control else [])
        return torch.cat(targets, dim=1).long()

    def mdl_columns(self) -> tuple[int, slice, slice | None]:
        """K = 2 (each s-class probe's decision); the C task columns, then the C control columns."""
        c = self.num_classes
        return 2, slice(0, c), slice(c, 2 * c) if self.has_control else None

    def new_scores(self) -> nn.Module:
        """Zhao's combination-level micro-F1 (context level), or micro-F1 over word x class decisions (type level)."""
        return (SClassMetrics if self.level == "context" else TypeLevelMetrics)(self.num_classes)

    def update_scores(self, metrics: nn.Module, head: nn.Module, batch: dict, control: bool, split: str) -> None:
        prob, prefix = self.predict_positive_prob(batch["features"], head), "control_" if control else ""
        if self.level == "type":
            metrics.update(prob, batch[f"{prefix}targets"])
        else:
            metrics.update(prob, batch[f"{prefix}label"], batch[f"{prefix}combination"])

    def scored(self, metrics: nn.Module) -> bool:
        return metrics.update_called

    def computed(self, metrics: nn.Module) -> dict:
        scores = metrics.compute()
        metrics.reset()
        return scores

    def log_scores(self, split: str, scores: dict) -> None:
        self.log(f"{split}/micro_f1", scores["micro_f1"], prog_bar=split == "dev")
        self.log(f"{split}/context_accuracy", scores["context_accuracy"])

    def selectivity(self, scores: dict, control: dict) -> dict:
        return with_selectivity(scores, control)

    def control_logs(self, scores: dict) -> dict:
        """dev/control_micro_f1 (the control head's keeper monitors it) and the selectivity."""
        return {"control_micro_f1": scores["control_micro_f1"], "selectivity": scores["selectivity"]}


def with_selectivity(real: dict, control: dict) -> dict:
    """The control scores and selectivity (Hewitt & Liang 2019: real score - control score) of one split."""
    return {
        "control_micro_f1": control["micro_f1"],
        "control_context_accuracy": control["context_accuracy"],
        "selectivity": real["micro_f1"] - control["micro_f1"],
        "selectivity_context_accuracy": real["context_accuracy"] - control["context_accuracy"],
    }
