"""The elastic-net penalty of the probes (probe.module.l1, probe.module.l2; Dalvi et al. 2019 in NeuroX's form): its
value by hand, each batched probe's gradient as it would be alone, the keyword contract of every probe module, the
refusal of a negative setting, saved probes of older files (without l1/l2) and probe.py's settings reaching the
module."""

from __future__ import annotations

import pytest
import torch

from probing.errors import ConfigError
from probing.probes.components.batched_probes import BatchedProbes
from probing.probes.components.families import linear, mlp1
from probing.probes.components.probe_head import ProbeHead
from probing.probes.saved import module_settings
from probing.probes.sclass_probe import SClassProbe
from probing.probes.word_probe import WordProbe
from probing.tasks.probe import built_probing
from tests.helpers.runs import compose_job


def test_the_penalty_is_l1_times_the_absolute_sum_plus_l2_times_the_frobenius_norm_per_probe():
    probes = BatchedProbes(2, 2, 2, linear(l1=0.5, l2=2.0))
    with torch.no_grad():
        probes.w1.copy_(torch.tensor([[[3.0, -4.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, -1.0]]]))
        probes.b1.fill_(100.0)  # biases are not penalised
    # probe 0: 0.5 * 7 + 2 * 5 = 13.5; probe 1: 0.5 * 2 + 2 * sqrt(2)
    torch.testing.assert_close(probes.head_penalties(), torch.tensor([13.5, 1.0 + 2 * 2**0.5]))
    assert float(probes.penalty().detach()) == pytest.approx(14.5 + 2 * 2**0.5)
    assert BatchedProbes(2, 2, 2, linear()).penalty() == 0.0


def test_an_mlp_is_penalised_over_both_weight_matrices():
    probes = BatchedProbes(1, 3, 2, mlp1(hidden_dim=4, l1=1.0, l2=1.0))
    expected = sum(w.abs().sum() + w.pow(2).sum().sqrt() for w in (probes.w1[0], probes.w2[0]))
    torch.testing.assert_close(probes.head_penalties()[0], expected)


def test_each_probes_penalty_gradient_is_the_one_it_gets_alone():
    torch.manual_seed(0)
    batched = BatchedProbes(3, 5, 4, linear(rank=2, l1=1e-2, l2=3e-2))
    batched.penalty().backward()
    for head in range(3):
        alone = BatchedProbes(1, 5, 4, linear(rank=2, l1=1e-2, l2=3e-2))
        alone.copy_heads_({name: value[head:head + 1] for name, value in batched.state_of_heads().items()},
                          torch.tensor([True]))
        alone.penalty().backward()
        for name in ("w1", "w2"):
            torch.testing.assert_close(getattr(batched, name).grad[head], getattr(alone, name).grad[0])
        assert torch.count_nonzero(batched.b1.grad if batched.b1.grad is not None else torch.zeros(1)) == 0


def test_the_head_adds_the_penalty_to_the_mix_penalty():
    head = ProbeHead(2, 3, 2, linear(l1=1.0), num_layers=2, mix={"l2_lambda": 0.5})
    expected = head.mlps.w1.abs().sum() + head.mix.l2_penalty()
    torch.testing.assert_close(head.penalty(), expected)


@pytest.mark.parametrize("key", ["l1", "l2"])
def test_a_negative_setting_is_refused_with_its_name(key):
    with pytest.raises(ConfigError, match=rf"^{key}=-0\.1 is not a number"):  # the family's argument
        WordProbe.from_settings(labels=["A", "B"], input_dim=4, family="linear", **{key: -0.1})


def test_every_probe_module_takes_and_records_the_penalty():
    for module in (WordProbe.from_settings(labels=["A", "B"], input_dim=4, family="linear", l1=1e-3, l2=1e-5,
                                           control=True),
                   SClassProbe.from_settings(labels=["A", "B"], input_dim=4, hidden_dim=3, l1=1e-3, l2=1e-5)):
        assert (module.settings()["l1"], module.settings()["l2"]) == (1e-3, 1e-5)
        assert module.probes.mlps.l1 == 1e-3 and module.probes.mlps.l2 == 1e-5
    word = WordProbe.from_settings(labels=["A", "B"], input_dim=4, family="linear", l1=1e-3, l2=1e-5, control=True)
    assert word.get_submodule("parts.control.probes").mlps.l1 == 1e-3


def test_saved_probes_without_the_penalty_are_rebuilt_without_it():
    older = {"module": {"labels": ["A", "B"], "input_dim": 4, "family": "mlp1", "hidden_dim": 3, "rank": None,
                        "dropout": 0.0, "num_layers": None, "control": False}, "level": "context"}
    module = SClassProbe(**module_settings(older))
    assert (module.hparams.l1, module.hparams.l2) == (0.0, 0.0) and module.probes.penalty() == 0.0


def test_probe_py_passes_the_penalty_from_the_command_line_to_the_probe_module(tmp_path):
    cfg = compose_job("probe", tmp_path, "task=upos", "layer=3", "probe=linear", "probe.module.l1=1e-3",
                      "probe.module.l2=1e-5")
    probing = built_probing(cfg)
    module = probing.module(labels=["A", "B"], input_dim=4, family=probing.family)
    assert (module.hparams.l1, module.hparams.l2) == (1e-3, 1e-5)
    assert module.probes.mlps.family.name == "linear" and module.probes.mlps.l1 == 1e-3
