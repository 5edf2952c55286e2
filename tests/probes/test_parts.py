"""The attached parts of a probe module (`probing.probes.parts`): a module carries only the parts its run asks for,
each hook loops over them, and they join the loss and the optimizer in a fixed order."""

from __future__ import annotations

import pytest
import torch

from probing.errors import ProbingError
from probing.probes.bits.information import BASELINE_PROBES, CONTROL_PROBES, JOINT_PROBES, PROBES
from probing.probes.bits.parts import ConditioningPart, OnlineCodePart
from probing.probes.word_probe import WordProbe

LABELS = ["a", "b", "c"]


def word_probe(**parts) -> WordProbe:
    torch.manual_seed(0)
    return WordProbe.from_settings(input_dim=4, labels=LABELS, family="linear", control=True, **parts)


def test_a_module_carries_only_the_parts_its_run_asks_for():
    assert not len(word_probe().parts)
    assert list(word_probe(mdl_block_ends=[2, 4]).parts) == [OnlineCodePart.NAME]
    assert list(word_probe(conditioning_dim=3).parts) == [ConditioningPart.NAME]
    with pytest.raises(ProbingError, match="Fix: probe.mdl=true"):
        word_probe().codelength([])


def test_the_parts_join_in_a_fixed_order_whatever_order_they_were_built_in():
    """The prefix probes are built (and draw their weights) first; the conditioning heads' losses and parameter
    groups come before theirs."""
    module = word_probe(mdl_block_ends=[2, 4, 8], conditioning_dim=3)
    assert list(module.parts) == [OnlineCodePart.NAME, ConditioningPart.NAME]
    assert [type(part) for part in module.joined_parts()] == [ConditioningPart, OnlineCodePart]
    conditioning, online_code = module.parts[ConditioningPart.NAME], module.parts[OnlineCodePart.NAME]
    assert module.trained_heads() == [module.probes, module.control_probes, conditioning.baseline_probes,
                                      conditioning.joint_probes, online_code.probes]
    assert list(module.bit_heads()) == [PROBES, CONTROL_PROBES, BASELINE_PROBES, JOINT_PROBES]


def test_the_conditioning_part_gives_each_head_its_columns():
    """[X; R] with X the first 3 columns: the task's probes read R, the baseline X, the joint head all of it."""
    module = word_probe(conditioning_dim=3)
    features = torch.arange(14.0).view(2, 7)
    torch.testing.assert_close(module.probed(features), features[:, 3:])
    torch.testing.assert_close(module.head_input(BASELINE_PROBES, features), features[:, :3])
    torch.testing.assert_close(module.head_input(JOINT_PROBES, features), features)
    torch.testing.assert_close(module.head_input(CONTROL_PROBES, features), features[:, 3:])
