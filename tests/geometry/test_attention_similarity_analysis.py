"""probing/geometry/attention_similarity_analysis.py, its component on its own: built from its config with its settings
checked, the metrics it logs, and a random-init `model` loaded by the one seeded loader. The whole analysis as a user
runs it is in tests/tasks/test_analyze.py."""

from __future__ import annotations

import pytest

from probing.analysis import AnalysisInputs, ModelSettings, build_analysis
from probing.errors import ConfigError
from probing.features.hf_models import load_pretrained
from probing.geometry.attention_similarity import load_attention_model
from probing.geometry.attention_similarity_analysis import AttentionSimilarity
from tests.helpers.runs import compose_job


def analysis(tmp_path, *overrides: str) -> AttentionSimilarity:
    return build_analysis(compose_job("analyze", tmp_path, "analysis=attention_similarity", *overrides).analysis)


def test_the_config_builds_the_component_with_its_settings(tmp_path):
    built = analysis(tmp_path, "analysis.max_length=16", "analysis.device=cpu")
    assert isinstance(built, AttentionSimilarity) and built.name == "attention_similarity"
    assert (built.batch_size, built.max_length, str(built.device), built.split) == (32, 16, "cpu", "dev")
    assert type(built.sentences).__name__ == "PosSource"  # analysis.sentences, built


@pytest.mark.parametrize("override, message", [
    ("analysis.batch_size=0", "analysis.batch_size=0 is not an integer >= 1"),
    ("analysis.max_length=2", "analysis.max_length=2 is not an integer >= 3"),
    ("analysis.device=tpu9", "analysis.device=tpu9 is not a device"),
    ("analysis.sentences._target_=probing.data.sources.NoSuchSource", "analysis.sentences: cannot be built"),
])
def test_the_constructor_refuses_a_bad_setting_naming_its_key(tmp_path, override, message):
    with pytest.raises(ConfigError, match="Fix:") as raised:
        analysis(tmp_path, override)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_metrics_are_the_layer_means_from_layer_one(tmp_path):
    assert analysis(tmp_path).metrics({"layer_means": [0.5, 0.25]}) == [(1, {"cosine_mean": 0.5}),
                                                                        (2, {"cosine_mean": 0.25})]


def test_a_random_init_model_is_the_seeded_one_of_the_common_loader(tmp_path, tiny_bert_path):
    seeded = load_pretrained(str(tiny_bert_path), random_init=True, init_seed=3)[2].weights_sha256
    assert load_attention_model(str(tiny_bert_path), None, True, 3)[2].weights_sha256 == seeded
    model = ModelSettings("tiny", str(tiny_bert_path), random_init=True, init_seed=3)
    results = analysis(tmp_path, "analysis.max_sentences=4").run(
        AnalysisInputs(model, compare_to=str(tiny_bert_path)), tmp_path / "run")
    assert results["weights_sha256"] == seeded != results["compare_to_weights_sha256"]
    assert results["random_init"] is True and (tmp_path / "run" / "attention_similarity.csv").is_file()
