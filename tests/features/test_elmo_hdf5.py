"""The ELMo HDF5 layout (allennlp `elmo --all`): imported into a store with the file's vectors exactly, refused where
it does not match the data, and exported from every-word stores so that store -> file -> store and file -> store ->
file give back the same float32 vectors."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest

from probing.data.records import WordInContext
from probing.data.text import sha256_file
from probing.errors import ConfigError, DataFormatError, ProbingError, StoreMismatchError
from probing.features.elmo_hdf5 import ElmoFileFeaturizer, export_every_word_store, sentences_from_elmo_file
from probing.features.extraction import extract_split
from probing.features.featurizer import Featurizer
from probing.features.sentence_store import SentenceWordEncoder
from probing.features.store import FeatureStore

LAYERS, DIM = 2, 4
SENTENCES = [("the", "apple", "juice", "is", "healthy", "."), ("she", "eats", "an", "apple"), ("new", "york")]
CLASSES = ["word"]


def known_values(index: int, words: int, layers: int = LAYERS, dim: int = DIM) -> np.ndarray:
    """Sentence i, layer l, word w, dim d -> 100 i + 10 l + w + d / 8 (exact in float32)."""
    return (100 * index + 10 * np.arange(layers)[:, None, None] + np.arange(words)[None, :, None]
            + np.arange(dim)[None, None, :] / 8).astype(np.float32)


def write_elmo(path: Path, sentences, values=None, index: bool = True) -> Path:
    """A file as `allennlp elmo --all` writes it: dataset str(i) per sentence, sentence_to_index as a (1,) vlen
    string dataset holding the JSON {line: str(i)}."""
    with h5py.File(path, "w") as handle:
        for i, words in enumerate(sentences):
            data = known_values(i, len(words)) if values is None else values[i]
            handle.create_dataset(str(i), data.shape, dtype="float32", data=data)
        if index:
            mapping = handle.create_dataset("sentence_to_index", (1,), dtype=h5py.special_dtype(vlen=str))
            mapping[0] = json.dumps({" ".join(words): str(i) for i, words in enumerate(sentences)})
    return path


def every_word_records(sentences) -> list[WordInContext]:
    return [WordInContext(tuple(words), (position,), words[position].lower(), "word", f"sentences.txt:{i + 1}")
            for i, words in enumerate(sentences) for position in range(len(words))]


def file_rows(path: Path) -> np.ndarray:
    """(words, layers, dim): the file's vectors, every word of sentence 0, then of sentence 1, ..."""
    with h5py.File(path, "r") as handle:
        names = sorted((name for name in handle if name.isdigit()), key=int)
        return np.concatenate([handle[name][()].transpose(1, 0, 2) for name in names])


def extract(records, featurizer, path: Path, **settings) -> Path:
    extract_split(records, featurizer, path, class_names=CLASSES, dtype="float32", progress=False, **settings)
    return path


def store_rows(path: Path) -> np.ndarray:
    with FeatureStore(path) as store:
        return store.read_all_layers()


# --- import --------------------------------------------------------------------------------------------------------

def test_a_store_filled_from_the_file_holds_its_vectors_exactly(tmp_path):
    elmo = write_elmo(tmp_path / "elmo.hdf5", SENTENCES)
    with ElmoFileFeaturizer(elmo) as featurizer:
        assert (featurizer.info.num_layers, featurizer.info.hidden_size) == (LAYERS, DIM)
        assert featurizer.store_name == "imported-elmo"
        # a budget of 6 tokens per batch (3 inputs of [sentence, position]): several batches and windows
        path = extract(every_word_records(SENTENCES), featurizer, tmp_path / "s.h5", max_tokens_per_batch=6, window=5)
    assert np.array_equal(store_rows(path), file_rows(elmo))
    assert isinstance(featurizer, Featurizer)
    assert featurizer.handle(0)  # open while pickled
    copy = pickle.loads(pickle.dumps(featurizer))  # e.g. for processes of a sharded extraction: reopens the file
    assert np.array_equal(copy.encode(copy.prepare_many(every_word_records(SENTENCES))).numpy(), file_rows(elmo))
    copy.close()
    featurizer.close()
    with FeatureStore(path) as store:
        assert store.metadata["weights_sha256"] == featurizer.sha256
        assert store.num_skipped == 0


def test_a_multiword_target_is_the_mean_of_its_words_and_each_sentence_is_read_once_per_batch(tmp_path, monkeypatch):
    featurizer = ElmoFileFeaturizer(write_elmo(tmp_path / "elmo.hdf5", SENTENCES))
    reads = []
    read = featurizer.read_sentence
    monkeypatch.setattr(featurizer, "read_sentence", lambda index: reads.append(index) or read(index))
    records = [*every_word_records(SENTENCES), WordInContext(SENTENCES[2], (0, 1), "new_york", "word"),
               WordInContext(SENTENCES[0], (1, 2, 4), "apple_juice_healthy", "word")]
    features = featurizer.encode(featurizer.prepare_many(records)).numpy()
    assert sorted(reads) == [0, 1, 2]
    assert np.array_equal(features[:-2], file_rows(featurizer.path))
    values = known_values(2, 2)
    assert np.array_equal(features[-2], (values[:, 0] + values[:, 1]) / 2)
    values = known_values(0, 6)
    assert np.allclose(features[-1], (values[:, 1] + values[:, 2] + values[:, 4]) / 3, rtol=0, atol=1e-5)
    featurizer.close()


def test_top_or_average_output_is_read_as_one_layer_and_extra_spaces_in_the_file_are_ignored(tmp_path):
    path = tmp_path / "top.hdf5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("0", data=known_values(0, 2)[1])
        mapping = handle.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
        mapping[0] = json.dumps({"new   york": "0"})
    featurizer = ElmoFileFeaturizer(path, name="top")
    assert featurizer.store_metadata()["num_layers"] == 1
    features = featurizer.encode(featurizer.prepare_many(every_word_records([SENTENCES[2]])))
    assert np.array_equal(features.numpy(), known_values(0, 2)[1:].transpose(1, 0, 2))
    assert sentences_from_elmo_file(path) == [SENTENCES[2]]


def test_a_sentence_missing_from_the_file_is_refused_naming_it(tmp_path):
    featurizer = ElmoFileFeaturizer(write_elmo(tmp_path / "elmo.hdf5", SENTENCES))
    long = tuple(f"word{i}" for i in range(40))
    with pytest.raises(StoreMismatchError, match=r"elmo.hdf5: the sentence 'word0 word1 .*\.\.\.' \(data:7\) is not "
                                                  r"in its sentence_to_index \(3 sentences\)\. Fix: ") as error:
        featurizer.prepare_many([*every_word_records(SENTENCES[:1]), WordInContext(long, (3,), "word3", "word",
                                                                                     "data:7")])
    assert "\n" not in str(error.value) and "word39" not in str(error.value)


def test_a_sentence_of_another_length_in_the_file_is_refused(tmp_path):
    values = [known_values(i, len(words)) for i, words in enumerate(SENTENCES)]
    values[1] = values[1][:, :3]  # 3 vectors for a sentence of 4 words
    featurizer = ElmoFileFeaturizer(write_elmo(tmp_path / "elmo.hdf5", SENTENCES, values))
    with pytest.raises(StoreMismatchError, match=r"dataset '1' holds 3 words, but its sentence 'she eats an apple' "
                                                  r"\(sentences.txt:2\) has 4\. Fix: "):
        extract(every_word_records(SENTENCES), featurizer, tmp_path / "s.h5")


def test_a_file_without_sentence_to_index_is_refused_with_the_fix(tmp_path):
    path = write_elmo(tmp_path / "elmo.hdf5", SENTENCES, index=False)
    with pytest.raises(DataFormatError, match=r"elmo.hdf5: the file has no `sentence_to_index` dataset.*Fix: add a "
                                              r"`sentence_to_index` dataset.*joined by single spaces"):
        ElmoFileFeaturizer(path)


def test_a_missing_path_or_a_file_that_is_not_hdf5_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"nothing.hdf5: no such file of imported word vectors\. Fix: "):
        ElmoFileFeaturizer(tmp_path / "nothing.hdf5")
    (tmp_path / "vectors.txt").write_text("the 0.1 0.2\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"vectors.txt: cannot be read as an HDF5 file .*Fix: "):
        ElmoFileFeaturizer(tmp_path / "vectors.txt")


def test_datasets_of_another_layer_count_or_dim_are_refused_naming_them(tmp_path):
    values = [known_values(i, len(words)) for i, words in enumerate(SENTENCES)]
    values[2] = known_values(2, 2, layers=3)
    with pytest.raises(DataFormatError, match=r"dataset '2' has 3 layers of dim 4, but dataset '0' has 2 of dim 4"):
        ElmoFileFeaturizer(write_elmo(tmp_path / "elmo.hdf5", SENTENCES, values))


def test_a_store_built_from_another_file_is_refused(tmp_path):
    records = every_word_records(SENTENCES)
    path = extract(records, ElmoFileFeaturizer(write_elmo(tmp_path / "a.hdf5", SENTENCES), name="elmo"),
                   tmp_path / "s.h5")
    other = [known_values(i, len(words)) + 1 for i, words in enumerate(SENTENCES)]
    with pytest.raises(StoreMismatchError, match="weights_sha256"):
        extract(records, ElmoFileFeaturizer(write_elmo(tmp_path / "b.hdf5", SENTENCES, other), name="elmo"), path)


# --- export --------------------------------------------------------------------------------------------------------

def test_a_bert_store_round_trips_through_the_file_exactly(tiny_bert_path, tmp_path):
    records = every_word_records(SENTENCES)
    bert = extract(records, SentenceWordEncoder(str(tiny_bert_path)), tmp_path / "bert.h5")
    out = export_every_word_store(bert, SENTENCES, tmp_path / "out" / "bert.hdf5")
    assert sorted(path.name for path in out.parent.iterdir()) == ["bert.hdf5"]  # no .partial left behind
    with h5py.File(out, "r") as handle:
        assert handle["sentence_to_index"].shape == (1,)
        assert h5py.check_string_dtype(handle["sentence_to_index"].dtype) is not None
        assert json.loads(handle["sentence_to_index"][0]) == {" ".join(words): str(i)
                                                               for i, words in enumerate(SENTENCES)}
        assert [handle[str(i)].shape for i in range(3)] == [(3, len(words), 32) for words in SENTENCES]
        assert handle["0"].dtype == np.float32
    assert sentences_from_elmo_file(out) == SENTENCES
    assert np.array_equal(file_rows(out), store_rows(bert))
    again = extract(records, ElmoFileFeaturizer(out), tmp_path / "again.h5")
    assert np.array_equal(store_rows(again), store_rows(bert))


def test_a_file_round_trips_through_a_store_exactly(tmp_path):
    elmo = write_elmo(tmp_path / "elmo.hdf5", SENTENCES)
    store = extract(every_word_records(SENTENCES), ElmoFileFeaturizer(elmo), tmp_path / "s.h5", window=4)
    out = export_every_word_store(store, sentences_from_elmo_file(elmo), tmp_path / "again.hdf5")
    with h5py.File(elmo, "r") as before, h5py.File(out, "r") as after:
        assert sorted(before) == sorted(after)
        for i in range(len(SENTENCES)):
            assert np.array_equal(before[str(i)][()], after[str(i)][()])


class SkipsTheFirstWordOf(ElmoFileFeaturizer):
    """The file's vectors, but the first word of one sentence left unrepresented (a skipped row of the store)."""

    def prepare_many(self, records):
        return [None if record.tokens == SENTENCES[1] and record.target == (0,) else prepared
                for record, prepared in zip(records, super().prepare_many(records))]


def test_a_store_with_skipped_rows_or_other_sentences_is_refused(tmp_path):
    elmo = write_elmo(tmp_path / "elmo.hdf5", SENTENCES)
    records = every_word_records(SENTENCES)
    skipping = extract(records, SkipsTheFirstWordOf(elmo), tmp_path / "skips.h5")
    with pytest.raises(ProbingError, match=r"skips.h5: 1 row\(s\) of the store are skipped .* first is row 6\).*Fix:"):
        export_every_word_store(skipping, SENTENCES, tmp_path / "out.hdf5")
    store = extract(records, ElmoFileFeaturizer(elmo), tmp_path / "s.h5")
    with pytest.raises(StoreMismatchError, match=r"the store has 12 rows, but the 2 sentences have 10 words"):
        export_every_word_store(store, SENTENCES[:2], tmp_path / "out.hdf5")
    with pytest.raises(StoreMismatchError, match=r"row 0 holds the word 'the', but word 0 of sentence 0 "
                                                  r"\('new york'\) is 'new'"):
        export_every_word_store(store, SENTENCES[::-1], tmp_path / "out.hdf5")
    with pytest.raises(ProbingError, match=r"has the word 'a b', which is empty or holds whitespace"):
        export_every_word_store(store, [("a b",)], tmp_path / "out.hdf5")
    assert not list(tmp_path.glob("out.hdf5*"))


def test_a_folder_of_split_files_is_read_as_one(tmp_path):
    folder = tmp_path / "vectors"
    folder.mkdir()
    write_elmo(folder / "dev.hdf5", SENTENCES[:2])
    write_elmo(folder / "train.hdf5", SENTENCES[1:])  # sentence 1 in both: read from dev.hdf5 (first by name)
    with ElmoFileFeaturizer(folder) as featurizer:
        assert featurizer.store_name == "imported-vectors" and len(featurizer.sentence_to_index) == len(SENTENCES)
        features = featurizer.encode(featurizer.prepare_many(every_word_records(SENTENCES))).numpy()
    dev, train = file_rows(folder / "dev.hdf5"), file_rows(folder / "train.hdf5")
    first_two = sum(len(words) for words in SENTENCES[:2])
    assert np.array_equal(features[:first_two], dev)
    assert np.array_equal(features[first_two:], train[len(SENTENCES[1]):])
    assert featurizer.sha256 not in (sha256_file(folder / "dev.hdf5"), sha256_file(folder / "train.hdf5"))
