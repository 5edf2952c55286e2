"""The ELMo HDF5 layout (allennlp `elmo --all`): imported into a store with the file's vectors exactly, refused where
it does not match the data or reads data outside the file, and exported from every-word stores so that store -> file
-> store and file -> store -> file give back the same float32 vectors; an export is one unit (an interrupted or mixed
export folder is refused on import) that never replaces a file it did not write."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from probing.config import build
from probing.data.records import WordInContext
from probing.data.text import sha256_file
from probing.errors import ConfigError, DataFormatError, ProbingError, StoreMismatchError
from probing.features import elmo_export
from probing.features.elmo_export import export_every_word_stores
from probing.features.elmo_hdf5 import ElmoFileFeaturizer, sentences_from_elmo_file
from probing.features.extraction import extract_split
from probing.features.featurizer import Featurizer
from probing.features.sentence_store import SentenceWordEncoder
from probing.features.store import FeatureStore
from tests.helpers.stores import assert_one_line_error, file_state, stop_after_the_first_exported_move

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
    out = export_every_word_stores({"bert": (bert, SENTENCES)}, tmp_path / "out")["bert"]
    assert out == tmp_path / "out" / "bert.hdf5"
    assert sorted(path.name for path in out.parent.iterdir()) == ["bert.hdf5", "export.json"]  # no .partial left
    manifest = json.loads((out.parent / "export.json").read_text(encoding="utf-8"))
    with FeatureStore(bert) as store:
        weights, fingerprint = store.metadata["weights_sha256"], store.metadata["records_sha256"]
    assert manifest["files"] == {"bert.hdf5": sha256_file(out)}
    assert manifest["source"] == {"bert.hdf5": {"store": str(bert), "model_name": str(tiny_bert_path),
                                                "weights_sha256": weights, "records_sha256": fingerprint}}
    with h5py.File(out, "r") as handle:
        assert dict(handle.attrs) == {"written_by": "probing export_elmo", "export_id": manifest["export_id"]}
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
    out = export_every_word_stores({"again": (store, sentences_from_elmo_file(elmo))}, tmp_path / "out")["again"]
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
    out = tmp_path / "out"
    with pytest.raises(ProbingError, match=r"skips.h5: 1 row\(s\) of the store are skipped .* first is row 6\).*Fix:"):
        export_every_word_stores({"train": (skipping, SENTENCES)}, out)
    store = extract(records, ElmoFileFeaturizer(elmo), tmp_path / "s.h5")
    with pytest.raises(StoreMismatchError, match=r"the store has 12 rows, but the 2 sentences have 10 words"):
        export_every_word_stores({"train": (store, SENTENCES[:2])}, out)
    with pytest.raises(StoreMismatchError, match=r"row 0 holds the word 'the', but word 0 of sentence 0 "
                                                  r"\('new york'\) is 'new'"):
        export_every_word_stores({"train": (store, SENTENCES[::-1])}, out)
    with pytest.raises(ProbingError, match=r"has the word 'a b', which is empty or holds whitespace"):
        export_every_word_stores({"train": (store, [("a b",)])}, out)
    assert not list(out.iterdir())


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


# --- data outside the file: not covered by its hash --------------------------------------------------------------

def replaced_member(path: Path, name: str, make) -> Path:
    """The file of SENTENCES with member `name` replaced by what `make(handle, name)` puts there."""
    write_elmo(path, SENTENCES)
    with h5py.File(path, "r+") as handle:
        del handle[name]
        make(handle, name)
    return path


def external_link(target: Path, path: str):
    return lambda handle, name: handle.__setitem__(name, h5py.ExternalLink(str(target), path))


def soft_link(handle, name):
    handle.create_dataset("kept", data=known_values(0, len(SENTENCES[0])))
    handle[name] = h5py.SoftLink("/kept")


def virtual(target: Path):
    def make(handle, name):
        layout = h5py.VirtualLayout(shape=(LAYERS, len(SENTENCES[0]), DIM), dtype="float32")
        layout[...] = h5py.VirtualSource(str(target), "0", shape=(LAYERS, len(SENTENCES[0]), DIM))
        handle.create_virtual_dataset(name, layout)
    return make


def external_storage(raw: Path):
    def make(handle, name):
        values = known_values(0, len(SENTENCES[0]))
        dataset = handle.create_dataset(name, values.shape, dtype="float32", external=[(str(raw), 0, values.nbytes)])
        dataset[...] = values
    return make


@pytest.mark.parametrize(("name", "member"), [
    ("0", "external link"),
    ("sentence_to_index", "external link"),
    ("0", "dangling external link"),
    ("0", "soft link"),
    ("0", "virtual dataset"),
    ("0", "external storage"),
])
def test_a_member_whose_data_lie_outside_the_file_is_refused_naming_it(tmp_path, name, member):
    """The file's SHA-256 (the store's identity) covers its own bytes only: data read through a link, a virtual
    dataset or external storage could change (e.g. to NaN) while the old store is reused."""
    target, gone = write_elmo(tmp_path / "target.hdf5", SENTENCES), tmp_path / "gone.hdf5"
    make, kind = {
        "external link": (external_link(target, f"/{name}"), f"an external link (to {target}:/{name})"),
        "dangling external link": (external_link(gone, "/0"), f"an external link (to {gone}:/0)"),
        "soft link": (soft_link, "a soft link (to /kept), which the file's SHA-256 does not pin"),
        "virtual dataset": (virtual(target), "a virtual dataset, whose data the file's SHA-256 does not cover"),
        "external storage": (external_storage(tmp_path / "raw.bin"), "stored in external files, whose data"),
    }[member]
    path = replaced_member(tmp_path / "elmo.hdf5", name, make)
    with pytest.raises(DataFormatError) as error:
        ElmoFileFeaturizer(path)
    assert_one_line_error(error.value, f"{path}: dataset '{name}' is {kind}", "Fix: copy the data into the file (")
    # as model=imported builds it: the file's own error, not "cannot be built" naming no file
    with pytest.raises(DataFormatError, match=f"^{path}: dataset '{name}'"):
        build({"_target_": "probing.features.elmo_hdf5.ElmoFileFeaturizer", "path": str(path)}, "representation")


# --- an export is one unit ---------------------------------------------------------------------------------------

SPLITS = {"train": SENTENCES[:1], "dev": SENTENCES[1:2], "test": SENTENCES[2:]}


def split_stores(tmp_path: Path, model: str, shift: float) -> dict[str, tuple[Path, list]]:
    """The every-word store of each split (one sentence each) of a `model` whose vectors are the known values plus
    `shift`, as export_every_word_stores takes them."""
    folder = tmp_path / model
    folder.mkdir()
    stores = {}
    for split, sentences in SPLITS.items():
        values = [known_values(i, len(words)) + shift for i, words in enumerate(sentences)]
        with ElmoFileFeaturizer(write_elmo(folder / f"{split}.hdf5", sentences, values)) as featurizer:
            stores[split] = (extract(every_word_records(sentences), featurizer, folder / f"{split}.h5"), sentences)
    return stores


def expected_rows(shift: float) -> np.ndarray:
    """(words, layers, dim): every word of SENTENCES as split_stores(..., shift) holds them (sentence 0 of each)."""
    return np.concatenate([(known_values(0, len(words)) + shift).transpose(1, 0, 2) for words in SENTENCES])


def imported_rows(path: Path) -> np.ndarray:
    with ElmoFileFeaturizer(path) as featurizer:
        return featurizer.encode(featurizer.prepare_many(every_word_records(SENTENCES))).numpy()


def test_an_export_stopped_after_moving_its_first_file_is_refused_on_import(tmp_path, monkeypatch):
    folder = tmp_path / "export"
    export_every_word_stores(split_stores(tmp_path, "a", 0), folder)
    assert np.array_equal(imported_rows(folder), expected_rows(0))
    second = split_stores(tmp_path, "b", 1)
    moved = stop_after_the_first_exported_move(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        export_every_word_stores(second, folder)
    monkeypatch.undo()
    assert moved == ["train.hdf5"]
    assert sorted(path.name for path in folder.iterdir()) == ["dev.hdf5", "test.hdf5", "train.hdf5"]
    assert np.array_equal(file_rows(folder / "train.hdf5"), expected_rows(1)[:len(SENTENCES[0])])  # b's train, a's rest
    with pytest.raises(StoreMismatchError) as error:
        ElmoFileFeaturizer(folder)
    assert_one_line_error(error.value, f"{folder}: train.hdf5 is from another export than dev.hdf5/test.hdf5, or the "
                                       "export was interrupted (export.json, which an export writes last, is missing)",
                          "Fix: run the export again")
    with pytest.raises(StoreMismatchError, match=r"dev.hdf5: the export of dev.hdf5 was interrupted \(export.json"):
        ElmoFileFeaturizer(folder / "dev.hdf5")
    export_every_word_stores(second, folder)  # run again: replaces every file of the earlier export
    assert np.array_equal(imported_rows(folder), expected_rows(1))


def test_an_export_stopped_before_moving_a_file_leaves_the_earlier_export_whole(tmp_path, monkeypatch):
    folder = tmp_path / "export"
    export_every_word_stores(split_stores(tmp_path, "a", 0), folder)
    before = {path.name: file_state(path) for path in folder.iterdir()}
    write = elmo_export.write_every_word_store

    def killed_while_writing_dev(store, sentences, out, export_id):
        if out.name.startswith("dev."):
            raise KeyboardInterrupt
        return write(store, sentences, out, export_id)

    monkeypatch.setattr(elmo_export, "write_every_word_store", killed_while_writing_dev)
    with pytest.raises(KeyboardInterrupt):
        export_every_word_stores(split_stores(tmp_path, "b", 1), folder)
    assert {path.name: file_state(path) for path in folder.iterdir()} == before  # no .partial left
    assert np.array_equal(imported_rows(folder), expected_rows(0))


def changed(folder: Path, other: Path) -> None:
    with h5py.File(folder / "dev.hdf5", "r+") as handle:
        handle["0"][0, 0, 0] += 1


@pytest.mark.parametrize(("change", "message"), [
    (changed, "the SHA-256 of dev.hdf5 is not the one export.json records; these are not the files of one export"),
    (lambda folder, other: shutil.copy(other / "train.hdf5", folder / "train.hdf5"),
     "train.hdf5 is from another export than dev.hdf5/test.hdf5 (the SHA-256 of train.hdf5 is not the one"),
    (lambda folder, other: write_elmo(folder / "extra.hdf5", SENTENCES), "export.json does not list extra.hdf5"),
    (lambda folder, other: (folder / "test.hdf5").unlink(), "test.hdf5, listed in export.json, is missing"),
])
def test_an_export_folder_changed_since_is_refused(tmp_path, change, message):
    folder, other = tmp_path / "export", tmp_path / "other"
    export_every_word_stores(split_stores(tmp_path, "a", 0), folder)
    export_every_word_stores(split_stores(tmp_path, "b", 1), other)
    change(folder, other)
    with pytest.raises(StoreMismatchError) as error:
        ElmoFileFeaturizer(folder)
    assert_one_line_error(error.value, f"{folder}: {message}", "Fix: run the export again")


def foreign_hdf5(path: Path) -> None:
    write_elmo(path, SENTENCES)  # as allennlp writes it: no export mark


@pytest.mark.parametrize(("name", "write", "message"), [
    ("train.hdf5", foreign_hdf5, "train.hdf5: the export would replace this file, which an export of this tool did "
                                 "not write"),
    ("dev.hdf5", lambda path: path.write_text("not HDF5\n"), "dev.hdf5: the export would replace this file"),
    ("export.json", lambda path: path.write_text('{"mine": 1}\n'), "export.json: the export would replace this file, "
                                                                   "which is not the manifest"),
    ("vectors.hdf5", foreign_hdf5, "vectors.hdf5: the folder holds .hdf5 files that this export does not write (1 "
                                   "such)"),
])
def test_an_export_never_replaces_a_file_it_did_not_write(tmp_path, name, write, message):
    folder = tmp_path / "export"
    folder.mkdir()
    write(folder / name)
    before = file_state(folder / name)
    never_read = tmp_path / "never.h5"  # refused before any store is opened
    with pytest.raises(ConfigError) as error:
        export_every_word_stores({split: (never_read, sentences) for split, sentences in SPLITS.items()}, folder)
    assert_one_line_error(error.value, f"{folder / message}", "Fix: export into another folder")
    assert file_state(folder / name) == before and [path.name for path in folder.iterdir()] == [name]
