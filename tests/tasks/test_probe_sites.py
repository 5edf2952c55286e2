"""probe.py on a tiny random decoder (Llama) with features.layers: the store holds the asked-for layers only, the
probe of a stored layer scores what it scores on the store of every layer, and a layer the store lacks is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from probing.errors import ConfigError
from probing.features.store import FeatureStore
from tests.helpers.runs import probe_in_process
from tests.helpers.tiny_decoders import save_tiny_llama


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> list[str]:
    folder = save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
    return [f"model.name_or_path={folder}", "model.num_layers=4", "logger=csv", "probe=linear",
            "trainer.max_epochs=1", "data.split.max_contexts_per_combination=3"]


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory, tiny_llama) -> dict:
    """The results of `probe.py features.layers=[0,2] layer=2` on the tiny decoder."""
    return probe_in_process(tmp_path_factory.mktemp("runs"), "some", "features.layers=[0,2]", "layer=2", *tiny_llama)


def test_the_store_holds_the_asked_for_layers_only(two_layers):
    train_store = Path(two_layers["stores"]["train"])
    assert ".mean.layers-0-2.ctx-all." in train_store.name
    with FeatureStore(train_store) as store:
        assert store.num_layers == 2
        assert store.metadata["layers"] == "[0, 2]" and store.metadata["site"] == "resid"
    assert (two_layers["layer"], two_layers["representation"]) == (2, "2")


def test_the_probe_scores_what_it_scores_on_the_store_of_every_layer(tmp_path, two_layers, tiny_llama):
    every = probe_in_process(tmp_path, "every", "layer=2", *tiny_llama)
    assert ".mean.ctx-all." in Path(every["stores"]["train"]).name
    with FeatureStore(two_layers["stores"]["train"]) as store, FeatureStore(every["stores"]["train"]) as whole:
        assert whole.num_layers == 4
        assert (store.read_layer(1) == whole.read_layer(2)).all() and (store.read_layer(0) == whole.read_layer(0)).all()
    for split in ("dev", "test"):
        assert two_layers[split] == every[split]


def test_a_layer_the_features_lack_is_refused_before_any_extraction(tmp_path, tiny_llama):
    with pytest.raises(ConfigError, match=r"^layer=1: the features hold only the layers \[0, 2\] .*features\.layers"):
        probe_in_process(tmp_path, "lacking", "features.layers=[0,2]", "layer=1", *tiny_llama)
    assert not (tmp_path / "lacking" / "stores").exists()
