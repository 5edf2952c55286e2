"""A toy split of ten records and the store metadata and features of it, for store and datamodule tests."""

from __future__ import annotations

import numpy as np

from probing.data.records import WordInContext

LAYERS, DIM = 3, 4
CLASSES = ["food", "organization", "plant"]
WORDS_AND_CLASSES = [
    ("apple", "food"), ("apple", "organization"), ("pine", "plant"), ("apple", "food"), ("juice", "food"),
    ("pine", "plant"), ("apple", "organization"), ("oak", "plant"), ("juice", "food"), ("oak", "plant"),
]


def make_records() -> list[WordInContext]:
    return [WordInContext(tokens=("the", word, "."), target=(1,), word=word, sclass=sclass, source=f"toy:{i + 1}")
            for i, (word, sclass) in enumerate(WORDS_AND_CLASSES)]


def metadata(num_rows: int, **overrides) -> dict:
    base = {"model_name": "tiny", "model_path": "/models/tiny", "weights_sha256": "w" * 64, "pooling": "mean",
            "context_size": "all", "max_length": 128, "dtype": "float16", "num_layers": LAYERS,
            "hidden_size": DIM, "num_rows": num_rows, "data_files": {"train.txt": "d" * 64}}
    return {**base, **overrides}


def features_of(rows) -> np.ndarray:
    """Row r, layer l, dim d -> r + l / 4 + d / 16 (exact in float16)."""
    rows = np.asarray(rows, dtype=np.float32)[:, None, None]
    return (rows + np.arange(LAYERS)[None, :, None] / 4 + np.arange(DIM)[None, None, :] / 16).astype(np.float32)
