"""FeatureIdentity: what identifies features, recorded under the keys results.json, probes files and eraser files
have always used, read back from a store's own keys, and compared field by field."""

from __future__ import annotations

import dataclasses

import pytest

from probing.features.identity import FeatureIdentity
from probing.probes.saved import MUST_MATCH
from probing.results.kinds import ProbeResults

RECORDED = {"model_name_or_path": "/models/minilm", "weights_sha256": "ab" * 32, "layer": 3,
            "representation": "3", "pooling": "mean", "context_size": None, "attention_window": None,
            "attention_policy": None, "weights_dtype": None, "forward_precision": None}
# What probes files, eraser files and results.json recorded before the weights' dtype and forward precision were
# fields of the identity (every run was then at float32).
RECORDED_BEFORE_PRECISION = {key: value for key, value in RECORDED.items()
                             if key not in ("weights_dtype", "forward_precision")}


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
                                                  "attention_window", "attention_policy", "weights_dtype",
                                                  "forward_precision")


@pytest.mark.parametrize(("metadata", "weights_dtype", "forward_precision"), [
    ({}, None, None),  # a featurizer that runs no forward (a baseline, static vectors), or a store made before
    ({"precision": "32"}, None, None),
    ({"precision": "bf16"}, None, "bf16"),
    ({"precision": "16"}, None, "16"),
    ({"precision": "32", "weights_dtype": "bf16"}, "bf16", None),
    ({"precision": "32", "weights_dtype": "fp16"}, "fp16", None),
    ({"precision": "32", "weights_dtype": "fp32"}, None, None),
])
def test_a_store_records_the_weights_dtype_and_the_forward_precision_none_at_float32(metadata, weights_dtype,
                                                                                    forward_precision):
    identity = FeatureIdentity.of_store(metadata)
    assert (identity.weights_dtype, identity.forward_precision) == (weights_dtype, forward_precision)


def test_files_recorded_before_the_precision_was_a_field_agree_with_a_float32_run():
    saved = FeatureIdentity.of(RECORDED_BEFORE_PRECISION)
    store = {"model_path": "/models/minilm", "weights_sha256": "ab" * 32, "pooling": "mean", "context_size": "all",
             "precision": "32"}
    at_float32 = dataclasses.replace(FeatureIdentity.of_store(store), layer=3, representation="3")
    assert saved == at_float32 and saved.differences(at_float32) == []
    in_bf16 = dataclasses.replace(FeatureIdentity.of_store({**store, "precision": "bf16"}), layer=3,
                                  representation="3")
    assert saved.differences(in_bf16) == [
        "forward_precision: None (saved) vs 'bf16' (this run)"]


@pytest.mark.parametrize(("settings", "recorded"), [
    ({}, (None, None)),
    ({"precision": "bf16"}, (None, "bf16")),
    ({"dtype": "bf16"}, ("bf16", None)),
    ({"dtype": "bf16", "precision": "bf16"}, ("bf16", None)),  # the forward in the weights' bf16, no autocast
])
def test_an_encoders_store_metadata_give_the_weights_dtype_and_precision_it_ran_with(tiny_bert_path, settings,
                                                                                   recorded):
    from probing.features.encoder import WordEncoder

    encoder = WordEncoder(str(tiny_bert_path), allow_emulated_bf16=True, **settings)
    identity = FeatureIdentity.of_store(encoder.store_metadata())
    assert (identity.weights_dtype, identity.forward_precision) == recorded


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
