"""probing/probes/components/families.py: the probe families as built objects. The layer sizes of each family by
hand, the record that saved probes keep and that builds the same family back, the settings each factory refuses, the
family that each conf/probe/*.yaml builds, and the structural map a tree task makes of the linear family."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pytest
import torch

from probing.config import build
from probing.errors import ConfigError
from probing.probes.components.families import ProbeFamily, from_record, linear, mlp1, mlp2
from probing.probes.trees.structural import StructuralHead, structural_map
from probing.vocabulary import PROBE_FAMILIES
from tests.helpers import CONFIG_DIR
from tests.helpers.runs import compose_job


def test_each_family_has_the_layers_of_hewitt_and_liang():
    assert linear().layer_sizes(10, 3) == [10, 3]
    assert linear(rank=4).layer_sizes(10, 3) == [10, 4, 3]
    assert mlp1(hidden_dim=7).layer_sizes(10, 3) == [10, 7, 3]
    assert mlp2(hidden_dim=7).layer_sizes(10, 3) == [10, 7, 7, 3]
    assert (linear().linear, mlp1().linear, mlp2().linear) == (True, False, False)


@pytest.mark.parametrize("family", [linear(rank=3, l1=1e-3), mlp1(hidden_dim=8, dropout=0.2), mlp2(l2=1e-5)])
def test_the_record_builds_the_same_family_back(family):
    record = family.record()
    assert set(record) == {"family", "hidden_dim", "rank", "dropout", "l1", "l2"} and record["family"] in PROBE_FAMILIES
    assert from_record(record) == family


def test_a_record_without_a_family_is_zhaos_mlp1():
    assert from_record({"hidden_dim": 1024}) == mlp1(hidden_dim=1024)


@pytest.mark.parametrize(("factory", "settings", "message"), [
    (mlp1, {"rank": 4}, r"^rank=4 constrains a linear probe .* the probe family is mlp1: an MLP's capacity is set by "
                        r"hidden_dim\. Fix: rank=null or probe=linear$"),
    (linear, {"rank": 0}, r"^rank=0 is not an integer >= 1"),
    (mlp2, {"hidden_dim": 0}, r"^hidden_dim=0"),
    (linear, {"dropout": 1.0}, r"^dropout=1\.0"),
    (mlp1, {"l1": -1.0}, r"^l1=-1\.0"),
    (linear, {"optimizer": partial(torch.optim.Adam, lr=-1)}, r"^optimizer\.lr=-1 is not"),
])
def test_a_factory_refuses_its_bad_settings_naming_its_arguments(factory, settings, message):
    with pytest.raises(ConfigError, match=message):
        factory(**settings)


@pytest.mark.parametrize(("overrides", "message"), [
    (["probe=mlp1", "probe.rank=4"], r"^probe\.rank=4 constrains a linear probe .* the probe family is mlp1: an "
                                     r"MLP's capacity is set by probe\.module\.hidden_dim\. Fix: probe\.rank=null or "
                                     r"probe=linear$"),
    (["probe=linear", "probe.rank=0"], r"^probe\.rank=0 is not an integer >= 1"),
    (["probe=mlp2", "probe.module.hidden_dim=0"], r"^probe\.module\.hidden_dim=0"),
    (["probe=linear", "probe.module.dropout=1.0"], r"^probe\.module\.dropout=1\.0"),
    (["probe=linear", "probe.module.optimizer.lr=-1"], r"^probe\.module\.optimizer\.lr=-1 is not"),
])
def test_a_family_built_from_the_config_names_the_keys_the_user_sets(tmp_path, overrides, message):
    cfg = compose_job("probe", tmp_path, *overrides)
    with pytest.raises(ConfigError, match=message):
        build(cfg.probe.module, "probe.module")


@pytest.mark.parametrize(("probe", "name", "hidden_dim"), [
    ("sclass_mlp", "mlp1", 1024), ("linear", "linear", 1000), ("mlp1", "mlp1", 1000), ("mlp2", "mlp2", 1000)])
def test_each_probe_config_builds_its_family(tmp_path, probe, name, hidden_dim):
    cfg = compose_job("probe", tmp_path, f"probe={probe}", "probe.module.optimizer.weight_decay=0.01")
    family = build(cfg.probe.module, "probe.module")
    assert isinstance(family, ProbeFamily) and (family.name, family.hidden_dim) == (name, hidden_dim)
    assert family.weight_decay == 0.01 and family.optimizer.keywords["lr"] == 1e-3


def test_a_tree_task_probes_with_the_linear_family_as_a_structural_map(tmp_path):
    cfg = compose_job("probe", tmp_path, "task=tree_depth", "probe.rank=2")
    network = structural_map(build(cfg.probe.module, "probe.module"), cfg.probing.kind)
    head = network.head(1, 5)
    assert cfg.probe.name == "linear" and isinstance(head, StructuralHead) and (head.kind, head.rank) == ("depth", 2)
    assert network.record() == linear(rank=2).record()


def test_the_probe_configs_interpolate_little():
    """The values a probing needs from the run (seed, level, reuse, the probe's settings) are passed when it is built,
    not copied into its config by interpolation."""
    files = [*Path(CONFIG_DIR, "probe").glob("*.yaml"), *Path(CONFIG_DIR, "probings").glob("*.yaml")]
    assert sum(len(re.findall(r"\$\{", path.read_text(encoding="utf-8"))) for path in files) <= 12
