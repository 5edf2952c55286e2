"""The attached parts of a probe module: what a kind adds beside its family's heads (the control task's head:
`probing.probes.controls`; the online code's prefix probes, the conditioning heads: `probing.probes.bits.parts`). A
part is built once, from its settings, by its factory, which checks them; the module holds its parts in `parts` (an
nn.ModuleDict, in the order they were built, which is the order their parameters were drawn in) and loops over them at
each hook point: the training loss, the optimizer's parameter groups, what its task probes read, the scores of each
split, the end of fitting and the checkpoint. A module without a part carries none: nothing there is optional and
tested for."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn


class ProbePart(nn.Module):
    """One attached part; each hook does nothing here. `ORDER`: where the part's losses and parameter groups join the
    module's (parts are built in the order their weights are drawn, which need not be the order they join in)."""

    NAME = ""
    ORDER = 0

    def probed(self, features: Tensor) -> Tensor:
        """What the task's probes read of a batch's features, given what they read without this part."""
        return features

    def bit_heads(self) -> dict[str, nn.Module]:
        """The part's heads whose cross-entropies are measured in bits, by name."""
        return {}

    def head_input(self, name: str, features: Tensor) -> Tensor | None:
        """What the part's head `name` reads of a batch's features (None: not the part's head)."""
        return None

    def add_loss(self, loss: Tensor, module: Any, features: Tensor, batch: dict) -> Tensor:
        """`loss` plus the part's training losses and penalties (`features`: what the task's probes read)."""
        return loss

    def trained_heads(self) -> list[nn.Module]:
        """The part's heads the optimizer steps, in the order of their parameter groups."""
        return []

    def validation_batch(self, module: Any, batch: dict) -> None:
        """Take in one dev batch."""

    def score_batch(self, module: Any, split: str, batch: dict) -> None:
        """The part's metrics of `split` take in a batch (after the module's)."""

    def split_scores(self, module: Any, split: str, scores: dict[str, Any]) -> dict[str, Any]:
        """What the part adds to the scores of `split` (`scores`: the module's and those of the parts before it)."""
        return {}

    def log_scores(self, module: Any, split: str, scores: dict[str, Any]) -> None:
        """Log the part's scores of `split` (`scores`: all of the split's)."""

    def end_validation(self, epoch: int, keep: bool) -> None:
        """The dev pass of `epoch` ended (`keep`: a fitting epoch's)."""

    def end_fit(self) -> None:
        """Fitting ended."""

    def save_state(self, checkpoint: dict) -> None:
        """Add to a training checkpoint what the part keeps beside its parameters."""

    def load_state(self, checkpoint: dict) -> None:
        """Read back what `save_state` added."""
