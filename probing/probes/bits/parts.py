"""The parts a classifier probe attaches for its measures in bits (`probing.probes.parts`): the online code's prefix
probes (`OnlineCodePart`, Voita & Titov 2020 §2.2) and the conditioning heads (`ConditioningPart`, Hewitt et al.
2021). Each is built from the module's contract values (`mdl_block_ends`, `conditioning_dim`) by its factory, which
gives no part for a run that does not ask for it (`online_code_part`, `conditioning_part`); what a run's settings
cannot combine with a part is refused from those settings, before any data is read (`check_online_code`,
`check_conditioning`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from probing.errors import ConfigError, setting
from probing.probes.bits.information import BASELINE_PROBES, JOINT_PROBES
from probing.probes.bits.prefix_probes import PrefixProbes, check_block_ends
from probing.probes.parts import ProbePart

MDL_BEST = "mdl_best"  # the checkpoint key of the prefix probes' best-dev weights


class OnlineCodePart(ProbePart):
    """The MDL prefix probes (`probes`, a `PrefixProbes` of each prefix's probes of the task's shape, for the task and,
    with the control task, for the control task), trained beside the task's probes on the rows of their prefixes
    (batch key `order`), each keeping its best-dev weights, restored when fitting ends; `codelength` then sends the
    training labels with them. The module gives the target columns (`mdl_targets`, `mdl_columns`)."""

    NAME = "online_code"
    ORDER = 1  # its losses and parameter groups join after the conditioning heads'

    def __init__(self, block_ends: Sequence[int], num_targets: int, input_dim: int, num_labels: int, family: Any,
                 num_layers: int | None = None, mix: Mapping[str, Any] | None = None):
        super().__init__()
        self.probes = PrefixProbes(block_ends, num_targets, input_dim, num_labels, family, num_layers, mix)

    def add_loss(self, loss: Tensor, module: Any, features: Tensor, batch: dict) -> Tensor:
        """+ each prefix probe's loss over its prefix's rows of the batch, + their penalties."""
        prefix_losses = self.probes.losses(features, module.mdl_targets(batch), batch.get("order"))
        return loss + prefix_losses.sum() + self.probes.penalty()

    def trained_heads(self) -> list[nn.Module]:
        return [self.probes]

    def validation_batch(self, module: Any, batch: dict) -> None:
        self.probes.update_dev(module.probed(batch["features"]), module.mdl_targets(batch))

    def end_validation(self, epoch: int, keep: bool) -> None:
        self.probes.end_dev_epoch(epoch, keep=keep)

    def end_fit(self) -> None:
        self.probes.restore_best()

    def save_state(self, checkpoint: dict) -> None:
        if self.probes.best is not None:
            checkpoint[MDL_BEST] = self.probes.best

    def load_state(self, checkpoint: dict) -> None:
        self.probes.best = checkpoint.get(MDL_BEST)

    def codelength(self, module: Any, train_batches: Iterable[dict]) -> dict[str, Any]:
        """The online codelength of the training labels (`PrefixProbes.online_code`), see `ClassifierProbe`."""
        num_labels, task, control = module.mdl_columns()
        batches = ((module.probed(batch["features"]), module.mdl_targets(batch), batch["order"])
                   for batch in train_batches)
        return self.probes.online_code(batches, num_labels, task, control)


def check_online_code(online_code: Any, labels: bool) -> None:
    """The online code (`online_code`, built from `mdl`; None when off) sends a classifier's labels: refused, from the
    run's settings before any data is read, for a probe module without `labels` (a structural probe)."""
    if online_code is not None and not labels:
        raise ConfigError(f"{setting('mdl')}=true sends labels with the online code; a tree probe predicts distances. "
                          f"Fix: {setting('mdl')}=false")


def online_code_part(block_ends: Iterable[int] | None, module: Any) -> list[OnlineCodePart]:
    """The online code's part of `module` (a `ClassifierProbe`, its heads built) for `mdl_block_ends`: none without
    them. Its prefix probes have the task's probes (and the control task's), each of the task's shape."""
    ends = check_block_ends(block_ends)
    if not ends:
        return []
    num_probes, num_outputs = module.probe_shape()
    return [OnlineCodePart(ends, num_probes * (2 if module.has_control else 1), module.input_dim, num_outputs,
                           module.family, module.num_layers, module.mix_options)]


class ConditioningPart(ProbePart):
    """`probe.condition_on`: features are [X; R], X the first `dim` columns; the task's, control and MDL probes read
    R, and two more heads of the family train beside them: `baseline_probes` on X and `joint_probes` on [X; R]
    (conditional V-information), measured in bits like the task's."""

    NAME = "conditioning"
    ORDER = 0

    def __init__(self, dim: int, baseline_probes: nn.Module, joint_probes: nn.Module):
        super().__init__()
        self.dim = dim
        self.baseline_probes, self.joint_probes = baseline_probes, joint_probes

    def probed(self, features: Tensor) -> Tensor:
        """R of [X; R]."""
        return features[..., self.dim:]

    def bit_heads(self) -> dict[str, nn.Module]:
        return {BASELINE_PROBES: self.baseline_probes, JOINT_PROBES: self.joint_probes}

    def head_input(self, name: str, features: Tensor) -> Tensor | None:
        """X (baseline_probes), [X; R] (joint_probes)."""
        if name == BASELINE_PROBES:
            return features[..., :self.dim]
        return features if name == JOINT_PROBES else None

    def add_loss(self, loss: Tensor, module: Any, features: Tensor, batch: dict) -> Tensor:
        """+ each head's task loss on what it reads, + its penalty."""
        for name, head in self.bit_heads().items():
            loss = loss + module.task_loss(head(self.head_input(name, batch["features"])), batch, control=False)
            loss = loss + head.penalty()
        return loss

    def trained_heads(self) -> list[nn.Module]:
        return list(self.bit_heads().values())


def check_conditioning(condition_on: Any, erase: Any) -> None:
    """The conditioning heads read [X; R] (`condition_on` names X): refused, from the run's settings before any data
    is read, with an erasure (`erase`), whose eraser is fitted on one representation."""
    if erase is not None and condition_on is not None:
        raise ConfigError(f"erase= and {setting('condition_on')}={condition_on} together: an eraser is fitted on one "
                          f"representation, not on a concatenation. Fix: erase=none or {setting('condition_on')}=null")


def conditioning_part(conditioning_dim: int | None, module: Any) -> list[ConditioningPart]:
    """The conditioning part of `module` (its heads built) for `conditioning_dim`: none without one. Its heads are
    drawn aside from the global random stream, so that the other heads and the batch order stay those of a run
    without conditioning."""
    if conditioning_dim is None:
        return []
    with torch.random.fork_rng(devices=[]):
        baseline = module.build_head(conditioning_dim)
        joint = module.build_head(conditioning_dim + module.input_dim)
    return [ConditioningPart(conditioning_dim, baseline, joint)]
