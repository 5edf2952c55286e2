"""probe.online=true's trainer (`probing.probes.online`): probes of every asked-for layer trained straight from the
forward pass of a tiny random Llama reach the same accuracies as the same probes trained on the vectors that
extraction stores (`WordEncoder.encode` of every record, read back per batch), same seed and batch order."""

from __future__ import annotations

import pytest
import torch

from probing.data.statements import StatementFile
from probing.features.encoder import WordEncoder
from probing.probes.components.families import linear
from probing.probes.online import forward_source, prepared_splits, stored_source, train_layer_probes
from tests.helpers.tiny_decoders import save_tiny_llama

LAYERS = [0, 2, 3]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    path = save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
    return WordEncoder(str(path), pooling="last", layers=LAYERS)


@pytest.fixture(scope="module")
def statements():
    """The bundled number comparisons as records: the first 160 of each split, and the labels."""
    data = StatementFile().load_statements().store_data()
    return {name: list(records)[:160] for name, records in data.splits.items()}, data.classes


def stored_vectors(encoder, splits):
    """(N, layers, D) per split, as extraction stores them: encoded in batches of their own."""
    return {name: torch.cat([encoder.encode(split.prepared[i:i + 64]) for i in range(0, len(split), 64)])
            for name, split in splits.items()}


def test_online_probes_reach_the_accuracies_of_probes_trained_on_the_stored_vectors(encoder, statements):
    records, classes = statements
    splits = prepared_splits(encoder, records, classes)
    assert [len(split) for split in splits.values()] == [len(split) for split in records.values()]
    family = linear()
    common = dict(splits=splits, layers=LAYERS, input_dim=32, num_labels=2, family=family, epochs=3, batch_size=32,
                  seed=0)
    online = train_layer_probes(forward_source(encoder, splits), **common)
    stored = train_layer_probes(stored_source(stored_vectors(encoder, splits)), **common)
    assert online.scores == stored.scores and online.best_epoch == stored.best_epoch
    assert len(online.scores["dev"]) == len(LAYERS)
