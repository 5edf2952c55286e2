"""probing/geometry/isotropy_analysis.py, its component on its own: built from its config with its settings checked, the
metrics it logs, and a random-init `model` loaded by the one seeded loader. The whole analysis as a user runs it is
in tests/tasks/test_analyze_isotropy.py."""

from __future__ import annotations

import pytest

from probing.analysis import AnalysisInputs, ModelSettings, build_analysis
from probing.errors import ConfigError
from probing.features.hf_models import load_pretrained
from probing.geometry.isotropy_analysis import Isotropy, chosen_layer
from tests.helpers.runs import compose_job


def analysis(tmp_path, *overrides: str) -> Isotropy:
    return build_analysis(compose_job("analyze", tmp_path, "analysis=isotropy", *overrides).analysis)


def test_the_config_builds_the_component_with_its_settings(tmp_path):
    built = analysis(tmp_path, "analysis.measures=[dot]", "analysis.correlation=spearman")
    assert isinstance(built, Isotropy) and built.name == "isotropy"
    assert (built.measures, built.correlation, built.bin_size, built.benchmarks) == (["dot"], "spearman", 1000, [])


@pytest.mark.parametrize("override, message", [
    ("analysis.batch_size=0", "analysis.batch_size=0 is not an integer >= 1"),
    ("analysis.bin_size=0", "analysis.bin_size=0 is not an integer >= 1"),
    ("analysis.fallback_tokens=true", "analysis.fallback_tokens=True is not an integer >= 1"),
    ("analysis.correlation=kendall", "analysis.correlation='kendall' is not one of"),
    ("analysis.measures=[cos]", "analysis.measures='cos' is not one of"),
    ("analysis.name=contextuality", "analysis.name='contextuality' is no analysis of Isotropy"),
])
def test_the_constructor_refuses_a_bad_setting_naming_its_key(tmp_path, override, message):
    with pytest.raises(ConfigError, match="Fix:") as raised:
        analysis(tmp_path, override)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_metrics_leave_out_pc_removed_and_step_the_input_embeddings_at_zero(tmp_path):
    results = {"layer": None, "isotropy": {"I_W": 0.5, "pc_removed": 1},
               "benchmarks": [{"benchmark": "sim", "transform": "original", "measure": "dot", "score": 0.25}]}
    assert analysis(tmp_path).metrics(results) == [(0, {"I_W": 0.5, "sim/original/dot": 0.25})]
    assert analysis(tmp_path).metrics({**results, "layer": 2})[0][0] == 2


def test_a_random_init_model_is_the_seeded_one_of_the_common_loader(tmp_path, tiny_bert_path):
    model = ModelSettings("tiny", str(tiny_bert_path), random_init=True, init_seed=3)
    results = analysis(tmp_path).run(AnalysisInputs(model), tmp_path / "run")
    assert results["weights_sha256"] == load_pretrained(str(tiny_bert_path), None, True, 3)[2].weights_sha256
    assert results["weights_sha256"] != load_pretrained(str(tiny_bert_path), None, True, 4)[2].weights_sha256
    assert results["random_init"] is True and results["source"] == "input embeddings"


def test_the_layer_is_the_input_embeddings_or_a_hidden_state_counted_either_way():
    assert chosen_layer(None, 7, "m") is None
    assert (chosen_layer(6, 7, "m"), chosen_layer(0, 7, "m"), chosen_layer(-1, 7, "m"), chosen_layer(-7, 7, "m")) == (
        6, 0, 6, 0)
    for layer in (7, -8, "3", True, 1.0):
        with pytest.raises(ConfigError, match=r"is not a layer of m: its hidden states are 0\.\.6.*Fix: layer=6, "
                                              "or layer=null for the input embedding matrix$"):
            chosen_layer(layer, 7, "m")
