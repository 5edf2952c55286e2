"""Extraction on a CUDA GPU (marked `gpu`, skipped without one): the tiny BERT's features on CUDA equal those on the
CPU, and bf16 autocast on CUDA (over float32 weights: model.dtype=fp32) runs, stays near float32 and is recorded as the
store's precision."""

from __future__ import annotations

import numpy as np
import pytest

from probing.data.records import WordInContext
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split
from probing.features.store import FeatureStore
from tests.helpers.run_if import run_if

pytestmark = [pytest.mark.gpu, run_if(min_gpus=1)]

CLASSES = ["food", "plant"]
SENTENCES = [("she", "eats", "the", "apple", "juice", "."), ("the", "oak", "and", "the", "pine", "."),
             ("new", "york", "city", "is", "healthy"), ("a", "larch", ",", "a", "pine", "and", "an", "oak")]


def records() -> list[WordInContext]:
    """Every word of the sentences as a target (one record each)."""
    return [WordInContext(tokens, (i,), tokens[i], CLASSES[i % 2], f"s{s}:{i}")
            for s, tokens in enumerate(SENTENCES) for i in range(len(tokens))]


def features(tiny_bert_path, device: str, precision: str = "32", dtype: str | None = None):
    encoder = WordEncoder(str(tiny_bert_path), device=device, precision=precision, max_length=32, dtype=dtype)
    prepared = [item for item in encoder.prepare_many(records()) if item is not None]
    return encoder, encoder.encode(prepared)


def test_cuda_features_equal_cpu_features(tiny_bert_path):
    _, on_cpu = features(tiny_bert_path, "cpu")
    encoder, on_cuda = features(tiny_bert_path, "cuda")
    assert encoder.device.type == "cuda" and next(encoder.model.parameters()).is_cuda
    assert on_cuda.device.type == "cpu" and on_cuda.dtype == on_cpu.dtype  # encode hands back CPU float32
    assert on_cuda.shape == on_cpu.shape == (sum(map(len, SENTENCES)), 3, 32)
    np.testing.assert_allclose(on_cuda.numpy(), on_cpu.numpy(), rtol=1e-4, atol=1e-4)


@run_if(min_gpus=1, bf16_cuda=True)
def test_bf16_autocast_on_cuda_runs_near_float32_and_is_recorded(tiny_bert_path, tmp_path):
    _, full = features(tiny_bert_path, "cpu")
    encoder, half = features(tiny_bert_path, "cuda", precision="bf16", dtype="fp32")  # else bf16 weights
    assert encoder.store_metadata()["precision"] == "bf16" and encoder.store_kind.endswith(".bf16")
    # bf16 keeps 8 bits of mantissa: a relative error of ~2^-8 per operation, a few of them through 2 layers
    scale = full.abs().max().item()
    assert 0 < (half - full).abs().max().item() < 0.05 * scale
    report = extract_split(records(), encoder, tmp_path / "s.h5", class_names=CLASSES, progress=False)
    assert report.rows_computed == len(records())
    with FeatureStore(tmp_path / "s.h5") as store:
        assert store.metadata["precision"] == "bf16"
        np.testing.assert_allclose(store.read_layer(2), half[:, 2].numpy(), atol=0.02 * scale)  # float16 in the store
