"""The encoder's layers and site (features.layers, features.site): only the asked-for layers are pooled and stored,
with the numbers of the every-layer features; the store records them in its name and metadata, and stores and probes
of other layers or sites are refused rather than mixed."""

from __future__ import annotations

import pytest
import torch

from probing.data.records import WordInContext
from probing.errors import ConfigError, StoreMismatchError
from probing.features.encoder import WordEncoder, layer_runs
from probing.features.extraction import extract_split
from probing.features.featurizers import featurizer_of, word_encoder
from probing.features.sentence_store import SentenceWordEncoder
from probing.features.sites import capture
from probing.features.store import FeatureStore
from probing.probes.representations import EncoderLayer, LayerMix
from tests.helpers.stores import assert_one_line_error
from tests.helpers.tiny_decoders import save_tiny_llama

SENTENCES = ["she eats the apple", "the apple juice is healthy", "new york city is unbelievable"]


@pytest.fixture(scope="module")
def tiny_llama_path(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


def records() -> list[WordInContext]:
    return [WordInContext(tuple(sentence.split()), (position,), sentence.split()[position], "x", f"test:{number}")
            for number, sentence in enumerate(SENTENCES) for position in (0, 2)]


@pytest.mark.parametrize("model", ["tiny_bert_path", "tiny_llama_path"])
def test_asked_for_layers_are_the_every_layer_features_at_those_layers(request, model):
    folder = str(request.getfixturevalue(model))
    every = WordEncoder(folder)
    some = WordEncoder(folder, layers=[2, 0])
    assert some.layers == [0, 2] and every.layers == list(range(every.info.num_layers))
    batch = every.prepare_many(records())
    torch.testing.assert_close(some.encode(batch), every.encode(batch)[:, [0, 2]], rtol=0, atol=0)
    assert some.encode([]).shape == (0, 2, every.info.hidden_size)


def test_the_attention_site_pools_the_attention_output_of_each_block(tiny_llama_path):
    """The pooled vectors of site=attn are the mean of the attention output over the target's pieces."""
    encoder = WordEncoder(str(tiny_llama_path), site="attn", pooling="mean")
    assert encoder.layers == [1, 2, 3]
    [prepared] = encoder.prepare_many([WordInContext(("new", "york", "city"), (1, 2), "york_city", "x", "test:1")])
    ids = torch.tensor([prepared.input_ids])
    with torch.no_grad():
        states = capture(encoder.model, ids, torch.ones_like(ids), [1, 2, 3], "attn")
    expected = torch.stack([state[0, prepared.target_pieces].mean(0) for state in states])
    torch.testing.assert_close(encoder.encode([prepared])[0], expected)


def test_the_defaults_keep_the_store_name_and_metadata_of_every_layer(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path))
    metadata = encoder.store_metadata()
    assert encoder.store_kind == "mean" and metadata["num_layers"] == 3
    assert "site" not in metadata and "layers" not in metadata
    same = WordEncoder(str(tiny_bert_path), layers=[0, 1, 2], site="resid")
    assert same.store_kind == "mean" and same.store_metadata() == metadata


def test_other_layers_and_sites_are_named_and_recorded(tiny_llama_path):
    some = WordEncoder(str(tiny_llama_path), layers=[0, 2])
    assert some.store_kind == "mean.layers-0-2"
    assert some.store_metadata().items() >= {"site": "resid", "layers": [0, 2], "num_layers": 2}.items()
    mlp = WordEncoder(str(tiny_llama_path), site="mlp", pooling="last", precision="32")
    assert mlp.store_kind == "last.mlp.layers-1to3"
    assert mlp.store_metadata().items() >= {"site": "mlp", "layers": [1, 2, 3], "num_layers": 3}.items()
    sentences = SentenceWordEncoder.sharing(mlp)
    assert sentences.store_kind == "last.every-word.mlp.layers-1to3" and sentences.layers == [1, 2, 3]
    assert [layer_runs(layers) for layers in ([0], [0, 1, 2, 5], [1, 3, 4])] == ["0", "0to2-5", "1-3to4"]


def test_a_store_of_other_layers_or_another_site_is_refused(tiny_llama_path, tmp_path):
    """Were two requests ever given one file, the metadata tell them apart: no store mixes layers or sites."""
    path = tmp_path / "store.h5"
    extract_split(records(), WordEncoder(str(tiny_llama_path), layers=[0, 2]), path, class_names=["x"],
                  progress=False)
    with FeatureStore(path) as store:
        assert store.num_layers == 2
    with pytest.raises(StoreMismatchError) as raised:
        extract_split(records(), WordEncoder(str(tiny_llama_path), site="attn", layers=[2]), path,
                      class_names=["x"], progress=False)
    message = str(raised.value)
    assert "layers: store has '[0, 2]', request has '[2]'" in message
    assert "site: store has 'resid', request has 'attn'" in message
    with pytest.raises(StoreMismatchError, match="layers: store has '\\[0, 2\\]', request has '<missing>'"):
        extract_split(records(), WordEncoder(str(tiny_llama_path)), path, class_names=["x"], progress=False)


def test_a_probe_reads_its_layer_among_the_stored_ones_and_is_refused_one_the_store_lacks(tiny_llama_path):
    encoder = WordEncoder(str(tiny_llama_path), layers=[0, 2])
    probe = EncoderLayer(encoder, 2)
    assert (probe.store_layer, probe.layer, probe.label) == (1, 2, "2")
    assert EncoderLayer(encoder, 0).store_layer == 0
    with pytest.raises(ConfigError) as raised:
        EncoderLayer(encoder, 1)
    assert_one_line_error(raised.value, "layer=1: the features hold only the layers [0, 2]", "features.layers",
                          "Fix: probe one of them, or add 1 to features.layers")
    with pytest.raises(ConfigError) as raised:
        LayerMix(encoder)
    assert_one_line_error(raised.value, "layer=mix mixes every hidden state", "features.layers")
    attention = EncoderLayer(WordEncoder(str(tiny_llama_path), site="attn"), -1)
    assert (attention.store_layer, attention.layer, attention.label) == (2, 3, "attn-3")


def test_the_factory_names_a_refused_layer_or_site_by_its_features_key(tiny_llama_path):
    settings = {"pooling": "mean", "max_length": 64, "device": "cpu", "precision": "32", "allow_emulated_bf16": False,
                "attention_window": None, "attention_policy": "sink"}
    model = {"name_or_path": str(tiny_llama_path)}

    def config(**changed):  # as a job builds it (featurizer_config)
        return {"_target_": f"{word_encoder.__module__}.word_encoder", "model": model,
                "settings": {**settings, **changed}, "context_size": None}

    with pytest.raises(ConfigError) as raised:
        featurizer_of(config(layers=[0, 9]))
    assert_one_line_error(raised.value, "features.layers=9 is not a layer of", "0..3",
                          "Fix: features.layers=null for all")
    with pytest.raises(ConfigError) as raised:
        featurizer_of(config(site="resid_post"))
    assert_one_line_error(raised.value, "features.site='resid_post' is not a site", "Fix: features.site=resid")
    with pytest.raises(ConfigError, match=r"^settings\.site='resid_post'"):  # the factory called in Python
        word_encoder(model, {**settings, "site": "resid_post"})
