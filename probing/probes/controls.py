"""The control task of Hewitt & Liang (2019), adapted to s-class probing: its settings (`ControlTask`), the control
class of each word, and the part of a probe module that trains and scores a head on it (`ControlPart`).

See docs/probing.md, 'Controls'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor, nn

from probing.data.settings import require_bool, require_int
from probing.data.splits import EVAL_SPLITS
from probing.errors import ConfigError, setting
from probing.features.static_embeddings import word_seed
from probing.probes.bits.information import CONTROL_PROBES
from probing.probes.parts import ProbePart

UNIT = float(2**64)
CONTROL = "control"


def class_distribution(counts: np.ndarray) -> np.ndarray:
    """Probabilities from per-class counts (e.g. of the training contexts); every class may be drawn only if seen."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.sum() <= 0:
        raise ValueError("cannot draw control classes: the training data has no labelled example")
    return counts / counts.sum()


def control_classes(words: Sequence[str], probabilities: np.ndarray, seed: int) -> np.ndarray:
    """The control class of each word: inverse-CDF draw of a uniform number fixed by (seed, word).

    A word's class depends only on the seed, the word and the distribution, not on the split it is in or on the
    order of `words`."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    cdf = np.cumsum(probabilities)
    cdf[np.flatnonzero(probabilities > 0)[-1]:] = 1.0  # rounding must not let a class of probability 0 be drawn
    uniforms = np.array([word_seed(seed, word) / UNIT for word in words], dtype=np.float64)
    uniforms = np.minimum(uniforms, np.nextafter(1.0, 0.0))  # 2**64 - 1 rounds to 1.0 in float64
    return np.searchsorted(cdf, uniforms, side="right").astype(np.int64)


def seen_rows(word_ids: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Which training rows to hold out as the `seen` split (a boolean mask), so that every held-out word still
    has a training context.

    Each row is held out with probability `fraction` (a uniform draw fixed by the seed and the row's position);
    where that would take every context of a word, the word's first row stays in training. Words with a single
    context therefore never enter the seen split."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"the seen fraction must be in [0, 1), got {fraction}")
    word_ids = np.asarray(word_ids)
    held = np.random.default_rng(seed).random(len(word_ids)) < fraction
    words_in_training = np.unique(word_ids[~held])
    _, first_rows = np.unique(word_ids, return_index=True)
    orphaned = first_rows[~np.isin(word_ids[first_rows], words_in_training)]
    held[orphaned] = False
    return held


class ControlTask:
    """`probe.control_task`, built once: `seed` is the control classes' seed (None when the task is off) and
    `seen_fraction` the share of training contexts held out as the seen split (0 = none; `check_level` refuses it
    where no word has several contexts, `refuse_seen_split` for a task that has no use for it). The probe module's
    part (`ControlPart`) is built from whether it is on."""

    def __init__(self, enabled: bool = True, seed: int = 0, seen_fraction: float | None = 0.0):
        enabled = require_bool(setting("enabled"), enabled)
        self.seed = require_int(setting("seed"), seed) if enabled else None
        self.seen_fraction = self._checked_fraction(float(seen_fraction or 0.0))

    def _checked_fraction(self, fraction: float) -> float:
        if not fraction:
            return 0.0
        key = f"{setting('seen_fraction')}={fraction}"
        if not 0.0 < fraction < 1.0:
            raise ConfigError(f"{key} is not a fraction. Fix: a value in [0, 1), e.g. 0.2 (0 = no seen split)")
        if self.seed is None:
            raise ConfigError(f"{key} holds out contexts to score the control task on, but the control task is off. "
                              f"Fix: {setting('enabled')}=true, or {setting('seen_fraction')}=0")
        return fraction

    def check_level(self, level: str) -> None:
        """A seen split needs several contexts per word: refused at the type level (a probe run's level)."""
        if self.seen_fraction and level != "context":
            raise ConfigError(f"{setting('seen_fraction')}={self.seen_fraction} needs several contexts per word; at "
                              "the type level each word is one training row, so no word can be both trained on and "
                              f"held out. Fix: {setting('seen_fraction')}=0")

    def refuse_seen_split(self, task: str) -> None:
        """A seen split holds out s-class contexts: refused for task `task`, whose dev and test already hold words
        seen in training (a word or tree task)."""
        if self.seen_fraction:
            raise ConfigError(f"{setting('seen_fraction')} holds out s-class contexts; task={task}'s dev and test "
                              f"already hold words seen in training. Fix: {setting('seen_fraction')}=0")


NO_CONTROL_TASK = ControlTask(enabled=False)


class ControlPart(ProbePart):
    """The control task's head (`probes`, one of the family, of the task's shape) and its metrics of each split:
    trained beside the task's probes on the batches' control targets (the module's `task_loss` with `control`),
    scored by the module's metrics on them, its scores joining the split's with the selectivities of the module's
    kind (`ProbeModule.selectivity`) and logged (`ProbeModule.control_logs`). Its cross-entropy is measured in bits
    like the task's (`control_probes`)."""

    NAME = CONTROL
    ORDER = -1  # its loss and parameter groups join right after the task's probes', before the other parts'
    HEAD = f"parts.{NAME}.probes"  # its head's path in the module: what its best-weights keeper keeps, saved probes

    def __init__(self, probes: nn.Module, metrics: dict[str, nn.Module]):
        super().__init__()
        self.probes, self.metrics = probes, nn.ModuleDict(metrics)

    def bit_heads(self) -> dict[str, nn.Module]:
        return {CONTROL_PROBES: self.probes}

    def add_loss(self, loss: Tensor, module: Any, features: Tensor, batch: dict) -> Tensor:
        """+ the head's loss on the control targets, + its penalty."""
        return loss + module.task_loss(self.probes(features), batch, control=True) + self.probes.penalty()

    def trained_heads(self) -> list[nn.Module]:
        return [self.probes]

    def score_batch(self, module: Any, split: str, batch: dict) -> None:
        module.update_scores(self.metrics[split], self.probes, batch, control=True, split=split)

    def split_scores(self, module: Any, split: str, scores: dict[str, Any]) -> dict[str, Any]:
        return module.selectivity(scores, module.computed(self.metrics[split]))

    def log_scores(self, module: Any, split: str, scores: dict[str, Any]) -> None:
        """<split>/<name> of the module's `control_logs` (selectivity on the progress bar, for dev)."""
        for name, value in module.control_logs(scores).items():
            if value is not None:
                module.log(f"{split}/{name}", value, prog_bar=split == "dev" and name == "selectivity")


def control_part(control: bool, module: Any) -> list[ControlPart]:
    """The control task's part of `module` (its probes built, so that the head draws its weights right after
    theirs): none without `control`."""
    if not require_bool("control", control):
        return []
    head = module.build_head(module.input_dim)
    return [ControlPart(head, {split: module.new_scores() for split in EVAL_SPLITS})]
