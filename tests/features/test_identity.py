"""FeatureIdentity: what identifies features, recorded under the keys results.json, probes files and eraser files
have always used, read back from a store's own keys, and compared field by field."""

from __future__ import annotations

import dataclasses

from probing.features.identity import FeatureIdentity
from probing.probes.saved import MUST_MATCH
from probing.results.kinds import ProbeResults

RECORDED = {"model_name_or_path": "/models/minilm", "weights_sha256": "ab" * 32, "layer": 3,
            "representation": "3", "pooling": "mean", "context_size": None, "attention_window": None,
            "attention_policy": None}


def test_it_is_recorded_under_the_keys_on_disk_and_read_back():
    identity = FeatureIdentity.of({**RECORDED, "level": "context", "seed": 0})
    assert identity.recorded() == RECORDED
    assert FeatureIdentity.of({}) == FeatureIdentity()


def test_a_store_records_it_under_its_own_keys():
    metadata = {"model_name": "minilm", "model_path": "/models/minilm", "weights_sha256": "ab" * 32,
                "pooling": "mean", "context_size": "all", "max_length": 128}
    assert FeatureIdentity.of_store(metadata) == FeatureIdentity("/models/minilm", "ab" * 32, pooling="mean")
    windowed = FeatureIdentity.of_store({"pooling": "first", "context_size": 4, "attention_window": 2,
                                         "attention_policy": "sink"}, pooling="mean")
    assert (windowed.pooling, windowed.context_size, windowed.attention_window) == ("first", 4, 2)
    assert FeatureIdentity.of_store({}, pooling="mean") == FeatureIdentity(pooling="mean")  # a baseline's own
    assert FeatureIdentity.of_the_featurizer() == ("model_name_or_path", "weights_sha256", "pooling", "context_size",
                                                  "attention_window", "attention_policy")


def test_differences_name_each_field_with_both_values_in_field_order():
    saved = FeatureIdentity.of(RECORDED)
    current = dataclasses.replace(saved, weights_sha256="cd" * 32, context_size=4)
    assert saved.differences(current) == [f"weights_sha256: {'ab' * 32!r} (saved) vs {'cd' * 32!r} (this run)",
                                          "context_size: None (saved) vs 4 (this run)"]
    assert saved.differences(current, FeatureIdentity.beyond_the_model()) == [
        "context_size: None (saved) vs 4 (this run)"]
    assert saved.differences(saved) == []


def test_saved_probes_and_results_compare_and_record_every_field():
    assert set(FeatureIdentity.beyond_the_model()) <= set(MUST_MATCH)  # the model may differ: that is the point
    assert not set(FeatureIdentity.MODEL) & set(MUST_MATCH)
    assert set(FeatureIdentity.fields()) <= {field.name for field in dataclasses.fields(ProbeResults)}
