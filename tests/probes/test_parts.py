"""The attached parts of a probe module (`probing.probes.parts`): a module carries only the parts its run asks for,
each hook loops over them, and they join the loss and the optimizer in a fixed order."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from probing.errors import ConfigError, ProbingError
from probing.probes.bits.information import BASELINE_PROBES, CONTROL_PROBES, JOINT_PROBES, PROBES
from probing.probes.bits.parts import ConditioningPart, OnlineCodePart, check_conditioning, check_online_code
from probing.probes.controls import ControlPart
from probing.probes.word_probe import WordProbe

LABELS = ["a", "b", "c"]
FEATURES = torch.randn(12, 4, generator=torch.Generator().manual_seed(3))
LABEL, CONTROL_LABEL = torch.arange(12) % 3, torch.arange(12) // 4


def batch() -> dict:
    return {"features": FEATURES, "label": LABEL, "control_label": CONTROL_LABEL}


def word_probe(control=True, **parts) -> WordProbe:
    torch.manual_seed(0)
    return WordProbe.from_settings(input_dim=4, labels=LABELS, family="linear", control=control, **parts)


def test_a_module_carries_only_the_parts_its_run_asks_for():
    assert not len(word_probe(control=False).parts)
    assert list(word_probe().parts) == [ControlPart.NAME]
    assert list(word_probe(control=False, mdl_block_ends=[2, 4]).parts) == [OnlineCodePart.NAME]
    assert list(word_probe(control=False, conditioning_dim=3).parts) == [ConditioningPart.NAME]
    fix = r"Fix: build the module with the online code's blocks \(its argument mdl_block_ends\)$"
    with pytest.raises(ProbingError, match=fix):
        word_probe().codelength([])


def test_the_parts_join_in_a_fixed_order_whatever_order_they_were_built_in():
    """The control head is built (and draws its weights) right after the task's probes, then the prefix probes; the
    control head's loss and parameter groups come first, then the conditioning heads', then the prefix probes'."""
    module = word_probe(mdl_block_ends=[2, 4, 8], conditioning_dim=3)
    assert list(module.parts) == [ControlPart.NAME, OnlineCodePart.NAME, ConditioningPart.NAME]
    assert [type(part) for part in module.joined_parts()] == [ControlPart, ConditioningPart, OnlineCodePart]
    control, conditioning = module.parts[ControlPart.NAME], module.parts[ConditioningPart.NAME]
    assert module.trained_heads() == [module.probes, control.probes, conditioning.baseline_probes,
                                      conditioning.joint_probes, module.parts[OnlineCodePart.NAME].probes]
    assert module.get_submodule(ControlPart.HEAD) is control.probes
    assert list(module.bit_heads()) == [PROBES, CONTROL_PROBES, BASELINE_PROBES, JOINT_PROBES]


def test_the_conditioning_part_gives_each_head_its_columns():
    """[X; R] with X the first 3 columns: the task's probes read R, the baseline X, the joint head all of it."""
    module = word_probe(conditioning_dim=3)
    features = torch.arange(14.0).view(2, 7)
    torch.testing.assert_close(module.probed(features), features[:, 3:])
    torch.testing.assert_close(module.head_input(BASELINE_PROBES, features), features[:, :3])
    torch.testing.assert_close(module.head_input(JOINT_PROBES, features), features)
    torch.testing.assert_close(module.head_input(CONTROL_PROBES, features), features[:, 3:])


def test_the_control_part_trains_and_scores_its_head_on_the_control_targets():
    """Its loss is the module's task loss on the control labels (cross-entropy by hand), its scores those of its
    head's argmax, and the split's selectivity the difference, as a word probe reports them."""
    module = word_probe()
    module.log = lambda *args, **kwargs: None  # no Trainer: nothing to log to
    control = module.parts[ControlPart.NAME].probes
    with torch.no_grad():
        expected = (F.cross_entropy(module(FEATURES)[:, 0], LABEL)
                    + F.cross_entropy(control(FEATURES)[:, 0], CONTROL_LABEL))
        assert float(module.training_step(batch(), 0)) == pytest.approx(float(expected))
        module.score_batch("dev", batch())
        module.log_split("dev")
        accuracy = float((module(FEATURES)[:, 0].argmax(-1) == LABEL).float().mean())
        control_accuracy = float((control(FEATURES)[:, 0].argmax(-1) == CONTROL_LABEL).float().mean())
    scores = module.split_metrics["dev"]
    assert scores["accuracy"] == pytest.approx(accuracy)
    assert scores["control_accuracy"] == pytest.approx(control_accuracy)
    assert scores["selectivity"] == pytest.approx(accuracy - control_accuracy)
    assert list(scores)[-3:] == ["control_accuracy", "control_macro_f1", "selectivity"]


def test_a_part_refuses_what_the_run_cannot_combine_with_it_from_the_settings():
    """Before any data is read: the online code without labels (a tree probe), conditioning with an erasure. Each
    names its setting by argument name (probe.py's build writes the key path)."""
    check_online_code(None, labels=False)
    check_online_code(object(), labels=True)
    with pytest.raises(ConfigError, match="mdl=true sends labels with the online code") as error:
        check_online_code(object(), labels=False)
    assert error.value.settings == ("mdl",)
    check_conditioning("0", None)
    check_conditioning(None, object())
    with pytest.raises(ConfigError, match="erase= and condition_on=0 together") as error:
        check_conditioning("0", object())
    assert error.value.settings == ("condition_on",)
