"""probing/probes/representation_choice.py and representations.py: the shorthand (`layer=`, `baseline=`,
`probe.level`, `embeddings=`, `probe.condition_on`) read once, into the kind of the one representation a run builds,
and each representation built."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir

from probing.errors import ConfigError
from probing.probes import representation_choice
from probing.probes.controls import NO_CONTROL_TASK, ControlTask
from probing.probes.datamodule import ALL_LAYERS
from probing.probes.representation_choice import conditioning_kind, representation_kind
from probing.probes.representations import (
    AvgSpaceOfLayer,
    Baseline,
    ConditionedRepresentation,
    EncoderLayer,
    LayerMix,
    StaticFileBaseline,
    TypeSpace,
)
from probing.tasks.probe import chosen_representation
from tests.helpers import CONFIG_DIR


def fake_encoder(num_layers: int = 7, **settings) -> SimpleNamespace:
    return SimpleNamespace(info=SimpleNamespace(num_layers=num_layers, model_name="fake"))


@pytest.mark.parametrize("layer,baseline,level,embeddings,expected", [
    (3, None, "context", None, "layer"), (-1, None, "context", None, "layer"),
    ("mix", None, "context", None, "mix"), ("prand", None, "context", None, "prand"),
    (3, "pbert", "context", None, "pbert"), (-1, "pstatic", "context", "glove", "pstatic"),
    (3, None, "type", None, "avg"), ("rand", None, "type", None, "type_rand"),
    ("bertw", None, "type", None, "type_bertw"), (3, None, "type", "glove", "static"),
    (2, None, "type", "avg", "avg"),
])
def test_the_shorthand_names_one_representation(layer, baseline, level, embeddings, expected):
    assert representation_kind(layer, baseline, level, embeddings) == expected


@pytest.mark.parametrize("condition_on,layer,expected", [
    (None, 3, "none"), (0, 3, "layer"), ("pbert", 3, "pbert"), ("prand", "prand", "prand"),
])
def test_the_conditioning_names_one_representation(condition_on, layer, expected):
    assert conditioning_kind(condition_on, layer) == expected


def composed(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("probe", overrides=list(overrides))


@pytest.fixture
def fake_featurizers(monkeypatch):
    """The baselines' featurizers as fakes that name their kind (what each reads is tested in tests/features)."""
    monkeypatch.setattr(representation_choice, "WordpieceBaseline", lambda kind, encoder: SimpleNamespace(kind=kind))
    monkeypatch.setattr(representation_choice, "static_file_baseline",
                        lambda path, name, oov_seed, context_size: SimpleNamespace(kind="pstatic", path=path))


# The encoder of 7 hidden states and the static file's space as fakes, in the config that probe.py composes.
FAKES = (f"features.encoder._target_={__name__}.fake_encoder",)


@pytest.mark.parametrize("overrides,built,label", [
    ([], EncoderLayer, "6"), (["layer=2"], EncoderLayer, "2"), (["layer=mix"], LayerMix, "mix"),
    (["baseline=prand"], Baseline, "P-Rand"), (["layer=pbert"], Baseline, "P-BERT"),
    (["baseline=bertw", "layer=3"], Baseline, "BERTw"),
    (["baseline=pstatic", "embeddings=glove"], StaticFileBaseline, "P-GloVe"),
    (["probe.level=type", "layer=2"], AvgSpaceOfLayer, "AVG-2"),
    (["probe.level=type", "embeddings=avg", "layer=3"], AvgSpaceOfLayer, "AVG-3"),
    (["probe.level=type", "layer=rand"], TypeSpace, "Rand"), (["probe.level=type", "layer=bertw"], TypeSpace, "BERTw"),
    (["probe.level=type", "embeddings=glove", "embeddings._target_=types.SimpleNamespace"], TypeSpace, "GloVe"),
])
def test_the_representation_chosen_is_the_one_built(fake_featurizers, overrides, built, label):
    cfg = composed(*overrides, *FAKES)
    assert set(cfg) >= {"representation"} and not set(cfg) & {"representations", "baselines", "type_spaces"}
    representation = chosen_representation(cfg)()
    assert type(representation) is built and representation.label == label


def test_a_baseline_builds_its_own_featurizer_only():
    representation = chosen_representation(composed("baseline=prand", "features.encoder._target_=no.such.encoder"))()
    assert representation.featurizer.kind == "prand" and representation.featurizer.identity["rand_dim"] == 300


def test_the_conditioning_representation_is_built_when_called_only(fake_featurizers):
    representation = chosen_representation(composed("layer=2", "probe.condition_on=pbert", *FAKES))()
    assert type(representation) is ConditionedRepresentation and representation.probed.label == "2"
    assert representation.conditioning().label == "P-BERT"
    assert type(chosen_representation(composed("probe.condition_on=0", *FAKES))()) is ConditionedRepresentation


@pytest.mark.parametrize("layer,baseline,level,message", [
    (3, "nope", "context", "Unknown baseline 'nope'"),
    ("mix", "pbert", "context", "layer=mix mixes the encoder's layers, but baseline=pbert"),
    (3, None, "words", "^level='words' is not one of context, type"),
    ("x", None, "context", r"layer='x' is not a layer. Fix: an integer \(0 = embeddings, -1 = the top layer\), mix"),
    (2.5, None, "context", "layer=2.5 is not a layer"), (True, None, "context", "layer=True is not a layer"),
    ("mix", None, "type", "^level=type needs a word space, and layer=mix names none. Fix: layer=l"),
])
def test_a_shorthand_that_names_no_representation_is_refused(layer, baseline, level, message):
    with pytest.raises(ConfigError, match=message):
        representation_kind(layer, baseline, level, None)


@pytest.mark.parametrize("overrides,message", [
    (["layer=abc"], "layer='abc' is not a layer"),
    (["probe.condition_on=mix"], "probe.condition_on=mix: the scalar mix is learned by each probe"),
    (["layer=mix", "probe.condition_on=0"], "probe.condition_on=0 with layer=mix"),
    (["representation.rand_dim=0"], "representation.rand_dim=0 is not an integer >= 1"),
    (["probe.level=words"], "^probe.level='words' is not one of context, type"),
    (["probe.level=type", "layer=mix"], "^probe.level=type needs a word space, and layer=mix names none. Fix: layer=l "
                                        r"\(AVG-l\), layer=rand, layer=bertw, or a static file: embeddings=glove "
                                        "embeddings.path=/path/to/glove.6B.300d.txt$"),
    (["probe.condition_on=words"], "^probe.condition_on='words' names no representation"),
])
def test_the_refusal_of_a_shorthand_comes_when_the_choice_is_built_before_anything_loads(overrides, message):
    with pytest.raises(ConfigError, match=message):
        chosen_representation(composed(*overrides, "features.encoder._target_=no.such.encoder"))


def test_a_word_space_built_from_the_config_names_its_keys(monkeypatch):
    monkeypatch.delenv("GLOVE_PATH", raising=False)
    choice = chosen_representation(composed("probe.level=type", "embeddings=glove", *FAKES))
    with pytest.raises(ConfigError, match=r"^embeddings=glove needs the embedding file\. Fix: add "
                                          r"embeddings\.path=/path/to/vectors\.txt"):
        choice()


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
    assert "the model's num_layers=13, but fake has 7 layers" in caplog.text


def test_the_control_task_is_computed_once_from_its_settings():
    assert (ControlTask(seed=3).seed, ControlTask(enabled=False, seed=3).seed, NO_CONTROL_TASK.seed) == (3, None, None)
    assert ControlTask(seed=1, seen_fraction=0.2).seen_fraction == 0.2
    with pytest.raises(ConfigError, match="the control task is off"):
        ControlTask(enabled=False, seen_fraction=0.2)
    with pytest.raises(ConfigError, match="^seen_fraction=0.2 needs several contexts per word; at the type level each "
                                          "word is one training row") as error:
        ControlTask(seen_fraction=0.2).check_level("type")
    assert error.value.settings == ("seen_fraction",)  # built at probe.control_task: probe.control_task.seen_fraction
    with pytest.raises(ConfigError, match="is not a fraction"):
        ControlTask(seen_fraction=1.5)
    with pytest.raises(ConfigError, match="^enabled must be true or false"):
        ControlTask(enabled="no")
