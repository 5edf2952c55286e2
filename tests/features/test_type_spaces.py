"""probing/features/type_spaces.py: the type-level spaces of Zhao et al. 2020 §3.2.1 (Rand, static files, BERTw,
AVG-l), each checked against vectors worked out by hand from a small file, the tiny BERT's embedding matrix, or a
toy store whose features are known (tests/helpers/stores.py: row r, layer l, dim d -> r + l/4 + d/16)."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from probing.data.types import TypeLevelData, WordTypes
from probing.errors import ConfigError
from probing.features.encoder import WordEncoder
from probing.features.static_embeddings import seeded_normal_vectors
from probing.features.store import FeatureStore, StoreWriter
from probing.features.type_spaces import AvgSpace, BertwSpace, RandSpace, StaticSpace, average_by_word, avg_vectors
from tests.helpers import TINY_VOCAB
from tests.helpers.stores import CLASSES, DIM, features_of, make_records, metadata, write_complete_store


def types(*words: str) -> WordTypes:
    """Word i has s-class i % 3 (a recognisable target row)."""
    targets = np.zeros((len(words), len(CLASSES)), bool)
    targets[np.arange(len(words)), np.arange(len(words)) % len(CLASSES)] = True
    return WordTypes(list(words), targets)


def data(**splits: WordTypes) -> TypeLevelData:
    return TypeLevelData("toy", list(CLASSES), dict(splits), [])


# --- Rand ------------------------------------------------------------------------------------------------------------

def test_rand_gives_a_word_one_vector_whatever_its_split_or_position():
    space = RandSpace(dim=5, seed=3)
    first = space.vectors(data(train=types("apple", "pine"), dev=types("oak")))[1]
    second = space.vectors(data(train=types("oak", "kiwi", "apple")))[1]
    assert first["train"].shape == (2, 5) and first["dev"].shape == (1, 5) and first["train"].dtype == np.float32
    np.testing.assert_array_equal(first["train"][0], second["train"][2])   # apple
    np.testing.assert_array_equal(first["dev"][0], second["train"][0])     # oak
    assert not np.allclose(first["train"][0], first["train"][1])
    other_seed = RandSpace(dim=5, seed=4).vectors(data(train=types("apple")))[1]["train"][0]
    assert not np.allclose(other_seed, first["train"][0])
    assert (space.name, space.label) == ("rand", "Rand")


def test_rand_keeps_every_word_and_reports_nothing():
    toy = data(train=types("apple"))
    kept, _, about = RandSpace(dim=2).vectors(toy)
    assert kept is toy and about == {}


@pytest.mark.parametrize("settings, message", [
    ({"dim": 0}, "embeddings.dim=0 is not an integer >= 1"),        # was a ValueError once the vectors were drawn
    ({"dim": 2.5}, "embeddings.dim=2.5 is not an integer >= 1"),    # was 2
    ({"seed": 1.5}, "embeddings.seed=1.5 is not an integer"),       # was 1
])
def test_rand_refuses_a_dimension_or_seed_that_is_no_count(settings, message):
    with pytest.raises(ConfigError, match=rf"^{re.escape(message)}\. Fix:"):
        RandSpace(**settings)


# --- static files ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [None, ""])
def test_a_static_space_without_its_file_is_refused(path):
    with pytest.raises(ConfigError, match=r"^embeddings=glove needs the embedding file\. Fix: add path="):
        StaticSpace(path, name="glove")


def test_a_static_spaces_oov_seed_is_an_integer(tmp_path):
    with pytest.raises(ConfigError, match=r"^oov_seed=True is not an integer\. Fix:"):
        StaticSpace(str(tmp_path / "vectors.txt"), name="glove", oov_seed=True)


def test_static_vectors_come_from_the_file_and_oov_words_are_seeded_and_counted(tmp_path):
    file = tmp_path / "vectors.txt"
    file.write_text("3 2\napple 1 2\npine 3.5 -4\nnew_york 0 1\n", encoding="utf-8")
    kept, vectors, about = StaticSpace(str(file), name="mini", oov_seed=7).vectors(
        data(train=types("Apple", "kiwi", "pine"), dev=types("new_york", "fig", "kiwi")))
    np.testing.assert_array_equal(vectors["train"][[0, 2]], [[1, 2], [3.5, -4]])   # "Apple" found lower-cased
    np.testing.assert_array_equal(vectors["dev"][0], [0, 1])
    kiwi, fig = seeded_normal_vectors(["kiwi", "fig"], 2, 7)
    np.testing.assert_array_equal(vectors["train"][1], kiwi)
    np.testing.assert_array_equal(vectors["dev"][1:], [fig, kiwi])                   # one vector per OOV word
    assert about == {
        "oov": {"train": {"words": 3, "oov_words": 1, "oov_examples": ["kiwi"]},
                "dev": {"words": 3, "oov_words": 2, "oov_examples": ["fig", "kiwi"]}},
        "embeddings_sha256": hashlib.sha256(file.read_bytes()).hexdigest(), "dim": 2}
    assert kept.splits["train"].words == ["Apple", "kiwi", "pine"]                   # no word left out


# --- BERTw -----------------------------------------------------------------------------------------------------------

def test_bertw_is_the_mean_input_embedding_of_the_wordpieces(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path))
    matrix = encoder.model.get_input_embeddings().weight.detach().numpy()

    def row(*pieces: str) -> np.ndarray:
        return matrix[[TINY_VOCAB.index(piece) for piece in pieces]].mean(axis=0)

    space = BertwSpace(encoder)
    _, vectors, about = space.vectors(data(train=types("apple", "new_york", "airheads"), dev=types("Oak", "zzq")))
    np.testing.assert_allclose(vectors["train"], [row("apple"), row("new", "york"), row("air", "##head", "##s")],
                               rtol=1e-6)
    np.testing.assert_allclose(vectors["dev"], [row("oak"), row("[UNK]")], rtol=1e-6)  # lower-cased; unknown: [UNK]
    assert about == {} and (space.name, space.label) == ("bertw", "BERTw")


# --- AVG-l -----------------------------------------------------------------------------------------------------------
# The toy store's rows: apple 0, 1, 3, 6; pine 2, 5; juice 4, 8; oak 7, 9.

@pytest.fixture
def stores(tmp_path) -> dict:
    """The toy store, and a second one of the same records whose features are 10 higher."""
    first = write_complete_store(tmp_path / "a.h5")
    second = tmp_path / "b.h5"
    FeatureStore.create(second, metadata(10), make_records(), CLASSES)
    with StoreWriter(second) as writer:
        writer.write_rows(list(range(10)), features_of(range(10)) + 10)
    return {"train": first, "dev": second}


def by_hand(mean_row: float, layer: int) -> np.ndarray:
    return mean_row + layer / 4 + np.arange(DIM) / 16


def test_average_by_word_over_one_store(stores):
    averages = average_by_word({"train": stores["train"]}, layer=1)
    assert sorted(averages) == ["apple", "juice", "oak", "pine"]
    np.testing.assert_allclose(averages["apple"], by_hand((0 + 1 + 3 + 6) / 4, 1))
    np.testing.assert_allclose(averages["pine"], by_hand((2 + 5) / 2, 1))
    np.testing.assert_allclose(averages["oak"], by_hand((7 + 9) / 2, 1))
    assert averages["apple"].dtype == np.float32


def test_average_by_word_pools_the_contexts_of_every_store(stores):
    averages = average_by_word(stores, layer=2)  # apple: 4 rows in each store, the second's 10 higher
    np.testing.assert_allclose(averages["apple"], by_hand((2.5 + 12.5) / 2, 2))
    np.testing.assert_allclose(averages["juice"], by_hand((6 + 16) / 2, 2))


def test_avg_leaves_out_and_counts_the_words_without_contexts():
    by_word = {"apple": np.array([1.0, 2.0], np.float32), "oak": np.array([3.0, 4.0], np.float32)}
    toy = data(train=types("kiwi", "apple", "fig", "oak"), dev=types("oak"))
    kept, vectors, about = avg_vectors(by_word, toy)
    assert kept.splits["train"].words == ["apple", "oak"] and kept.splits["dev"].words == ["oak"]
    np.testing.assert_array_equal(kept.splits["train"].targets, toy.splits["train"].targets[[1, 3]])
    np.testing.assert_array_equal(vectors["train"], [[1, 2], [3, 4]])
    assert about == {"words_without_contexts": {"train": 2, "dev": 0}}
    assert (kept.name, kept.classes) == ("toy", CLASSES)


def test_avg_refuses_a_split_without_any_context():
    with pytest.raises(ConfigError, match="^AVG space: no dev word of toy has a context in the feature store. Fix:"):
        avg_vectors({"apple": np.zeros(2, np.float32)}, data(train=types("apple"), dev=types("kiwi")))


def test_the_avg_space_of_a_layer(stores):
    space = AvgSpace({"train": stores["train"]}, layer=1)
    kept, vectors, about = space.vectors(data(train=types("apple", "kiwi"), test=types("pine")))
    np.testing.assert_allclose(vectors["train"], [by_hand(2.5, 1)])
    np.testing.assert_allclose(vectors["test"], [by_hand(3.5, 1)])
    assert about == {"words_without_contexts": {"train": 1, "test": 0}, "stores": {"train": str(stores["train"])}}
    assert space.label == "AVG-1" and kept.splits["train"].words == ["apple"]
