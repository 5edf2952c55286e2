"""probing/probes/representations.py: the shorthand (`layer=`, `baseline=`, `probe.level`, `embeddings=`) resolved
once at composition into the kind of the one representation the config holds, and each representation built."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from probing.cli import probing_cause
from probing.errors import ConfigError
from probing.probes.controls import NO_CONTROL_TASK, ControlTask
from probing.probes.datamodule import ALL_LAYERS
from probing.probes.representations import (
    AvgSpaceOfLayer,
    Baseline,
    EncoderLayer,
    LayerMix,
    StaticFileBaseline,
    TypeSpace,
    built_representation,
    representation_of,
)
from probing.vocabulary import BASELINE_LABELS
from tests.helpers import CONFIG_DIR


def fake_encoder(num_layers: int = 7) -> SimpleNamespace:
    return SimpleNamespace(info=SimpleNamespace(num_layers=num_layers, model_name="fake"))


@pytest.mark.parametrize("layer,baseline,level,embeddings,expected", [
    (3, None, "context", None, "layer"), (-1, None, "context", None, "layer"),
    ("mix", None, "context", None, "mix"), ("prand", None, "context", None, "prand"),
    (3, "pbert", "context", None, "pbert"), (-1, "pstatic", "context", "glove", "pstatic"),
    (3, None, "type", None, "avg"), ("rand", None, "type", None, "type_rand"),
    ("bertw", None, "type", None, "type_bertw"), (3, None, "type", "glove", "static"),
])
def test_the_shorthand_names_one_representation(layer, baseline, level, embeddings, expected):
    assert representation_of(layer, baseline, level, embeddings) == expected


def composed(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("probe", overrides=list(overrides))


def space(name: str, label: str) -> dict:
    return {"_target_": "types.SimpleNamespace", "name": name, "label": label}


# What the representations read, as plain `_target_` configs of fakes: an encoder of 7 hidden states, each baseline's
# featurizer, the word spaces, a static file.
PARTS = {"encoder": {"_target_": f"{__name__}.fake_encoder"},
         "baselines": {name: {"_target_": "types.SimpleNamespace", "kind": name} for name in BASELINE_LABELS},
         "type_spaces": {"avg": space("avg", "AVG"), "rand": space("rand", "Rand"), "bertw": space("bertw", "BERTw")},
         "embeddings": space("glove", "GloVe")}


@pytest.mark.parametrize("overrides,built,label", [
    ([], EncoderLayer, "6"), (["layer=2"], EncoderLayer, "2"), (["layer=mix"], LayerMix, "mix"),
    (["baseline=prand"], Baseline, "P-Rand"), (["layer=pbert"], Baseline, "P-BERT"),
    (["baseline=bertw", "layer=3"], Baseline, "BERTw"),
    (["baseline=pstatic", "embeddings=glove"], StaticFileBaseline, "P-GloVe"),
    (["probe.level=type", "layer=2"], AvgSpaceOfLayer, "AVG-2"),
    (["probe.level=type", "layer=rand"], TypeSpace, "Rand"), (["probe.level=type", "layer=bertw"], TypeSpace, "BERTw"),
    (["probe.level=type", "embeddings=glove"], TypeSpace, "GloVe"),
])
def test_the_composed_config_holds_the_one_representation_chosen(overrides, built, label):
    cfg = composed(*overrides)
    assert set(cfg) >= {"representation"} and "representations" not in cfg
    representation = built_representation(cfg.representation.kind, cfg.layer, **PARTS)
    assert type(representation) is built and representation.label == label


def test_a_baseline_builds_its_own_featurizer_only():
    representation = built_representation("prand", -1, **{**PARTS, "encoder": {"_target_": "no.such.encoder"}})
    assert representation.featurizer.kind == "prand"


@pytest.mark.parametrize("layer,baseline,level,message", [
    (3, "nope", "context", "Unknown baseline 'nope'"),
    ("mix", "pbert", "context", "layer=mix mixes the encoder's layers, but baseline=pbert"),
    (3, None, "words", "probe.level='words' is not one of context, type"),
    ("x", None, "context", r"layer='x' is not a layer. Fix: an integer \(0 = embeddings, -1 = the top layer\), mix"),
    (2.5, None, "context", "layer=2.5 is not a layer"), (True, None, "context", "layer=True is not a layer"),
    ("mix", None, "type", "probe.level=type needs a word space, and layer=mix names none. Fix: layer=l"),
])
def test_a_shorthand_that_names_no_representation_is_refused(layer, baseline, level, message):
    with pytest.raises(ConfigError, match=message):
        representation_of(layer, baseline, level, None)


def test_the_refusal_of_a_shorthand_comes_when_the_config_is_resolved():
    cfg = composed("layer=abc")
    with pytest.raises(Exception) as resolving:
        OmegaConf.select(cfg, "representation.kind")
    assert isinstance(probing_cause(resolving.value), ConfigError)  # what the entry scripts print as one line


def test_a_layer_knows_its_store_layer_and_label():
    layer = EncoderLayer(fake_encoder(), -1)
    assert (layer.store_layer, layer.layer, layer.label, layer.level) == (6, 6, "6", "context")
    with pytest.raises(ConfigError, match=r"^layer=7 is not a layer of fake: its hidden states are 0\.\.6"):
        EncoderLayer(fake_encoder(), 7)


def test_the_mix_reads_every_layer_and_needs_all_of_them():
    mix = LayerMix(fake_encoder(5))
    assert (mix.store_layer, mix.layer, mix.label, mix.expected_layers) == (ALL_LAYERS, "mix", "mix", 5)


def test_a_baseline_is_labelled_as_in_the_paper():
    baseline = Baseline("pbert", featurizer=object())
    assert (baseline.store_layer, baseline.layer, baseline.label) == (0, "pbert", "P-BERT")


def test_a_type_space_takes_its_label_from_the_space():
    space = TypeSpace(SimpleNamespace(label="GloVe", name="glove"))
    assert (space.level, space.label, space.layer) == ("type", "GloVe", None)


def test_a_mismatched_model_num_layers_is_a_warning(caplog):
    EncoderLayer(fake_encoder(7), 3, configured_layers=13)
    assert "model.num_layers=13, but fake has 7 layers" in caplog.text


def test_the_control_task_is_computed_once_from_its_settings():
    assert (ControlTask(seed=3).seed, ControlTask(enabled=False, seed=3).seed, NO_CONTROL_TASK.seed) == (3, None, None)
    assert ControlTask(seed=1, seen_fraction=0.2).seen_fraction == 0.2
    with pytest.raises(ConfigError, match="the control task is off"):
        ControlTask(enabled=False, seen_fraction=0.2)
    with pytest.raises(ConfigError, match="at probe.level=type each word is one training row"):
        ControlTask(seen_fraction=0.2).check_level("type")
    with pytest.raises(ConfigError, match="is not a fraction"):
        ControlTask(seen_fraction=1.5)
    with pytest.raises(ConfigError, match="probe.control_task.enabled must be true or false"):
        ControlTask(enabled="no")
