"""Feature store: layout, round trip, metadata refusal, unreadable files, checksums and non-finite features."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import xxhash

from probing.data.records import WordInContext
from probing.errors import ConfigError, ProbingError, StoreCorruptError, StoreMismatchError
from probing.features.store import FeatureStore, StoreWriter, block_groups, records_fingerprint, store_path
from tests.helpers.stores import (
    CLASSES,
    DIM,
    LAYERS,
    assert_one_line_error,
    features_of,
    make_records,
    metadata,
    write_complete_store,
)


@pytest.fixture
def store_file(tmp_path) -> Path:
    path = tmp_path / "split.h5"
    records = make_records()
    FeatureStore.create(path, metadata(len(records)), records, CLASSES)
    return path


def test_store_path_is_slugified():
    assert store_path("root", "sentence-transformers/all-MiniLM-L6-v2", "Wiki PSE", "train", "mean", None) == Path(
        "root/sentence-transformers--all-minilm-l6-v2/wiki-pse/train.mean.ctx-all.h5")
    assert store_path("root", "bert-base-uncased", "streusle", "dev", "last", 4).name == "dev.last.ctx-4.h5"


def test_layout_is_allocated_at_creation_and_contiguous(store_file):
    with h5py.File(store_file, "r") as handle:
        features = handle["features"]
        assert features.shape == (LAYERS, 10, DIM)
        assert features.dtype == np.float16
        assert features.chunks is None and features.id.get_offset() is not None  # one run of bytes in the file
        assert features.id.get_storage_size() == LAYERS * 10 * DIM * 2  # allocated before any write
        assert handle.attrs["data_files"] == '{"train.txt": "' + "d" * 64 + '"}'
        assert handle.attrs["store_format"] == 3
        assert handle["block_rows"].shape == (10,) and handle["block_xxh3"].shape == (10, LAYERS)
    assert not store_file.with_name("split.h5.partial").exists()


def test_round_trip_in_shuffled_batches(store_file):
    features = np.random.default_rng(0).normal(size=(10, LAYERS, DIM)).astype(np.float32)
    batches = [[7, 2, 9], [0, 5], [8, 1, 3], [6, 4]]
    for done, batch in enumerate(batches):
        with StoreWriter(store_file) as writer:
            assert len(writer.pending_rows()) == 10 - sum(map(len, batches[:done]))
            writer.write_rows(batch, features[batch])
    with h5py.File(store_file, "r") as handle:  # batches are stored contiguously, in the order written
        assert handle["slots"][()].tolist() == [3, 6, 1, 7, 9, 4, 8, 0, 5, 2]
    with FeatureStore(store_file) as store:
        assert store.is_complete and store.num_rows == 10 and store.num_skipped == 0
        for layer in range(LAYERS):
            got = store.read_layer(layer)
            assert got.dtype == np.float32 and got.shape == (10, DIM)
            np.testing.assert_allclose(got, features[:, layer], rtol=1e-3, atol=1e-4)  # float16 keeps 11 bits
            assert not np.allclose(got, features[:, (layer + 1) % LAYERS], atol=0.1)
        assert store.labels().tolist() == [0, 1, 2, 0, 0, 2, 1, 2, 0, 2]
        assert store.word_ids().tolist() == [0, 0, 1, 0, 2, 1, 0, 3, 2, 3]
        assert store.combination_ids().tolist() == [0, 1, 2, 0, 3, 2, 1, 4, 3, 4]
        assert store.words == ["apple", "pine", "juice", "oak"]
        assert store.class_names == CLASSES
        assert store.combinations == [("apple", "food"), ("apple", "organization"), ("pine", "plant"),
                                      ("juice", "food"), ("oak", "plant")]
        assert store.metadata["max_length"] == 128


def test_blocks_are_read_in_groups_of_whole_blocks():
    spans = [(0, 3), (3, 2), (5, 3), (8, 2)]
    assert block_groups(spans, 4) == [range(0, 2), range(2, 4)]  # 5 slots, then 5
    assert block_groups(spans, 1) == [range(i, i + 1) for i in range(4)]
    assert block_groups(spans, 100) == [range(0, 4)]
    assert block_groups([], 4) == []


SCATTERED = ((7, 2), (9, 0, 5), (8,), (1, 3, 6, 4))
IN_RECORD_ORDER = ((0, 1), (2, 3, 4), (5,), (6, 7, 8, 9))  # as extraction writes its windows
PARTLY_IN_ORDER = ((0, 1), (4, 2, 3), (5,), (6, 7, 8, 9))  # as a store resumed by another version may be


@pytest.mark.parametrize("batches", [SCATTERED, IN_RECORD_ORDER, PARTLY_IN_ORDER])
@pytest.mark.parametrize("group_bytes", [1, 6 * DIM * 2, 1 << 20])  # one block per group, two groups, one group
def test_reading_in_groups_gives_every_row_in_record_order_in_any_dtype(tmp_path, monkeypatch, group_bytes, batches):
    monkeypatch.setattr("probing.features.store.READ_GROUP_BYTES", group_bytes)
    path = write_complete_store(tmp_path / "split.h5", batches=batches)
    expected = features_of(range(10))
    with FeatureStore(path) as store:
        np.testing.assert_array_equal(store.read_all_layers(), expected)
        stored = store.read_layer(1, dtype=None)
        assert stored.dtype == np.float16
        np.testing.assert_array_equal(stored, expected[:, 1].astype(np.float16))
        into = np.full((10, LAYERS + 1, DIM), -1.0)  # a strided float64 view is filled in place
        store.read_layer_into(2, into[:, 1])
        np.testing.assert_array_equal(into[:, 1], expected[:, 2])
        assert (into[:, [0, 2, 3]] == -1).all()


def test_skipped_rows_are_kept_in_the_file_but_hidden_from_readers(store_file):
    with StoreWriter(store_file) as writer:
        writer.mark_skipped([6, 1])
        assert writer.pending_rows().tolist() == [0, 2, 3, 4, 5, 7, 8, 9]
        kept = [0, 2, 3, 4, 5, 7, 8, 9]
        writer.write_rows(kept, features_of(kept))
    with FeatureStore(store_file) as store:
        assert store.is_complete and store.num_rows == 8 and store.num_skipped == 2
        assert store.row_ids().tolist() == kept
        assert store.labels().tolist() == [0, 2, 0, 0, 2, 2, 0, 2]
        np.testing.assert_array_equal(store.read_layer(1)[:, 3], [r + 0.25 + 3 / 16 for r in kept])


def test_a_row_is_written_once(store_file):
    with StoreWriter(store_file) as writer:
        writer.write_rows([3], features_of([3]))
        with pytest.raises(ValueError, match="distinct and not yet written"):
            writer.write_rows([1, 3], features_of([1, 3]))
        with pytest.raises(ValueError, match="distinct and not yet written"):
            writer.write_rows([5, 5], features_of([5, 5]))
        assert writer.pending_rows().tolist() == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def test_float32_store_is_exact(tmp_path):
    records = make_records()[:3]
    path = tmp_path / "f32.h5"
    FeatureStore.create(path, metadata(3, dtype="float32"), records, CLASSES)
    with StoreWriter(path) as writer:
        writer.write_rows([2, 0, 1], features_of([2, 0, 1]))
    with FeatureStore(path) as store:
        np.testing.assert_array_equal(store.read_layer(0), features_of([0, 1, 2])[:, 0])


def test_unfinished_store_and_unknown_layer_are_refused(store_file):
    with FeatureStore(store_file) as store:
        with pytest.raises(ProbingError, match="unfinished.*run the extraction again"):
            store.read_layer(0)
        with pytest.raises(ProbingError, match=r"layer 3 does not exist.*0\.\.2"):
            store.read_layer(3)


def test_metadata_mismatch_lists_every_differing_key(store_file):
    request = metadata(10, pooling="last", max_length=64, model_path="/elsewhere/tiny",
                       data_files={"train.txt": "e" * 64}, split="dev")
    with pytest.raises(StoreMismatchError) as raised:
        FeatureStore(store_file).check_metadata(request)
    message = str(raised.value)
    assert "pooling: store has 'mean', request has 'last'" in message
    assert "max_length: store has 128, request has 64" in message
    assert "split: store has '<missing>', request has 'dev'" in message
    assert 'data_files: store has \'{"train.txt": "ddd' in message
    assert "model_path" not in message  # provenance only: the weights hash identifies the model
    assert len(message.splitlines()) == 1 + 4 + 1
    assert "Fix: delete the file" in message and "paths.store_dir" in message


def test_matching_metadata_passes_and_other_code_version_only_warns(store_file, monkeypatch, caplog):
    FeatureStore(store_file).check_metadata(metadata(10, model_path="/moved/tiny"))
    monkeypatch.setattr("probing.features.store.code_version", lambda: "99.0")
    with caplog.at_level(logging.WARNING, logger="probing.features.store"):
        FeatureStore(store_file).check_metadata(metadata(10))
    assert "this is probing 99.0" in caplog.text


def test_a_store_without_a_recorded_precision_is_a_float32_store(store_file):
    assert "precision" not in FeatureStore(store_file).metadata  # written as stores were before precision was recorded
    FeatureStore(store_file).check_metadata(metadata(10, precision="32"))
    with pytest.raises(StoreMismatchError, match="precision: store has '32', request has 'bf16'"):
        FeatureStore(store_file).check_metadata(metadata(10, precision="bf16"))


def test_a_bf16_store_is_refused_for_a_request_without_precision(tmp_path):
    path = write_complete_store(tmp_path / "bf16.h5", precision="bf16")
    with pytest.raises(StoreMismatchError, match="precision: store has 'bf16', request has '32'"):
        FeatureStore(path).check_metadata(metadata(10))


def test_unreadable_file_says_to_delete_it(tmp_path):
    path = tmp_path / "broken.h5"
    path.write_bytes(b"not an hdf5 file" * 10)
    with pytest.raises(StoreMismatchError, match="cannot be opened as a feature store.*otherwise delete the file"):
        StoreWriter(path)


def test_unknown_class_and_dtype_are_refused(tmp_path):
    with pytest.raises(ProbingError, match=r"s-classes \['plant'\] are not in the class list"):
        FeatureStore.create(tmp_path / "x.h5", metadata(10), make_records(), ["food", "organization"])
    with pytest.raises(ConfigError, match="features.dtype='bfloat16' is not supported"):
        FeatureStore.create(tmp_path / "x.h5", metadata(10, dtype="bfloat16"), make_records(), CLASSES)
    assert not list(tmp_path.iterdir())


def test_fingerprint_covers_content_not_source():
    records = make_records()
    moved = [WordInContext(r.tokens, r.target, r.word, r.sclass, source="other:1") for r in records]
    relabelled = records[:-1] + [WordInContext(records[-1].tokens, records[-1].target, "oak", "food")]
    assert records_fingerprint(moved) == records_fingerprint(records)
    assert records_fingerprint(relabelled) != records_fingerprint(records)
    assert records_fingerprint(records[::-1]) != records_fingerprint(records)


def test_each_block_records_its_length_and_an_xxh3_hash_per_layer(tmp_path):
    path = write_complete_store(tmp_path / "split.h5")
    with h5py.File(path, "r") as handle:
        features, hashes = handle["features"], handle["block_xxh3"]
        assert handle["block_rows"][()].tolist() == [4, 0, 0, 0, 6, 0, 0, 0, 0, 0]
        assert hashes.dtype == np.uint64
        for layer in range(LAYERS):
            assert hashes[0, layer] == xxhash.xxh3_64_intdigest(features[layer, 0:4].tobytes())
            assert hashes[4, layer] == xxhash.xxh3_64_intdigest(features[layer, 4:10].tobytes())
            assert hashes[0, layer] != hashes[4, layer]


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(data)


@pytest.mark.parametrize("batches", [SCATTERED, IN_RECORD_ORDER])
def test_corrupted_feature_bytes_are_refused_on_read(tmp_path, batches):
    path = write_complete_store(tmp_path / "split.h5", batches=batches)
    with h5py.File(path, "r") as handle:
        layer_1 = handle["features"].id.get_offset() + 10 * DIM * 2
    overwrite(path, layer_1 + 5 * DIM * 2, np.random.default_rng(0).bytes(2 * DIM))  # slot 5 of layer 1
    with FeatureStore(path) as store:
        np.testing.assert_array_equal(store.read_layer(0), features_of(range(10))[:, 0])
        np.testing.assert_array_equal(store.read_layer(2), features_of(range(10))[:, 2])
        for read in (lambda: store.read_layer(1), lambda: store.read_layer(1, dtype=None), store.read_all_layers):
            with pytest.raises(StoreCorruptError) as raised:
                read()
            assert_one_line_error(raised.value, str(path), "layer 1", "checksum", "Fix: delete the file")


@pytest.mark.parametrize("batches", [SCATTERED, IN_RECORD_ORDER])
@pytest.mark.parametrize("dtype", [None, "float32"])
def test_non_finite_features_are_refused_on_read(tmp_path, batches, dtype):
    path = write_complete_store(tmp_path / "split.h5", batches=batches)
    with h5py.File(path, "r+") as handle:  # an inf with a matching checksum: damage no checksum can see
        layer = handle["features"][2]
        layer[1, 3] = np.inf
        handle["features"][2] = layer
        first = len(batches[0])
        handle["block_xxh3"][0, 2] = xxhash.xxh3_64_intdigest(layer[0:first].tobytes())
    with FeatureStore(path) as store:
        store.read_layer(1)
        with pytest.raises(StoreCorruptError) as raised:
            store.read_layer(2, dtype=dtype)
    assert_one_line_error(raised.value, str(path), "layer 2", "NaN or inf", "Fix: delete the file")


def test_features_that_are_not_finite_in_storage_are_refused_before_writing(store_file):
    huge = features_of([3, 5])
    huge[1, 2, 0] = 1e6  # beyond float16's largest value, 65504: it would be stored as inf
    nan = features_of([4])
    nan[0, 0, 0] = np.nan
    with StoreWriter(store_file) as writer:
        with pytest.raises(ProbingError) as raised:
            writer.write_rows([3, 5], huge)
        assert_one_line_error(raised.value, str(store_file), "record 5", "float16", "features.dtype=float32")
        with pytest.raises(ProbingError) as raised:
            writer.write_rows([4], nan)
        assert_one_line_error(raised.value, str(store_file), "record 4", "NaN or inf")
        assert writer.pending_rows().tolist() == list(range(10))
        writer.write_rows([3, 5], features_of([3, 5]))  # nothing was written, not even a slot used
    with h5py.File(store_file, "r") as handle:
        assert handle["slots"][[3, 5]].tolist() == [0, 1]


def test_a_float32_store_keeps_what_float16_cannot(tmp_path):
    path = tmp_path / "f32.h5"
    FeatureStore.create(path, metadata(10, dtype="float32"), make_records(), CLASSES)
    features = features_of(range(10)) * 1e4
    with StoreWriter(path) as writer:
        writer.write_rows(range(10), features)
    with FeatureStore(path) as store:
        np.testing.assert_array_equal(store.read_all_layers(), features)


def test_store_of_the_previous_format_is_refused_with_the_delete_fix(tmp_path):
    path = write_complete_store(tmp_path / "old.h5")
    with h5py.File(path, "r+") as handle:  # format 2: CRC-32 checksums
        handle.attrs["store_format"] = 2
        del handle["block_xxh3"]
        handle.create_dataset("block_crc32", data=np.zeros((10, LAYERS), np.uint32))
    with FeatureStore(path) as store:
        with pytest.raises(StoreMismatchError) as raised:
            store.check_metadata(metadata(10))
        assert "store_format: store has 2, request has 3" in str(raised.value)
        assert "Fix: delete the file" in str(raised.value)
        with pytest.raises(StoreMismatchError) as raised:
            store.read_layer(0)
        assert_one_line_error(raised.value, str(path), "store_format", "Fix: delete the file")
    with pytest.raises(StoreMismatchError, match="store_format.*Fix: delete the file"):
        StoreWriter(path)


def test_a_batch_cut_off_while_its_flags_were_written_is_rewritten_whole(store_file):
    with StoreWriter(store_file) as writer:
        writer.write_rows([7, 2, 9], features_of([7, 2, 9]))
        writer.write_rows([0, 5, 8], features_of([0, 5, 8]))
        writer.file["written"][[0, 8]] = 0  # only row 5 of the second batch got its flag before the kill
    with StoreWriter(store_file) as writer:
        assert writer.pending_rows().tolist() == [0, 1, 3, 4, 5, 6, 8]
        writer.write_rows([8, 0, 1, 3, 4, 5, 6], features_of([8, 0, 1, 3, 4, 5, 6]))
    with h5py.File(store_file, "r") as handle:
        assert handle["slots"][()].tolist() == [4, 5, 1, 6, 7, 8, 9, 0, 3, 2]
    with FeatureStore(store_file) as store:
        np.testing.assert_array_equal(store.read_all_layers(), features_of(range(10)))


def test_an_hdf5_file_that_is_not_a_store_is_refused(tmp_path):
    path = tmp_path / "foreign.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("written", data=np.ones(3, np.uint8))
    with pytest.raises(StoreMismatchError) as raised:
        FeatureStore(path).read_layer(0)
    assert_one_line_error(raised.value, str(path), "not a feature store", "delete")


def test_a_store_missing_a_table_is_refused(tmp_path):
    path = write_complete_store(tmp_path / "split.h5")
    with h5py.File(path, "r+") as handle:
        del handle["skipped"]
    with pytest.raises(StoreCorruptError) as raised:
        FeatureStore(path).read_layer(0)
    assert_one_line_error(raised.value, str(path), "skipped", "Fix: delete the file")


def test_a_store_larger_than_the_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: SimpleNamespace(total=10**9, used=10**9 - 100, free=100))
    path = tmp_path / "split.h5"
    with pytest.raises(ProbingError) as raised:
        FeatureStore.create(path, metadata(10), make_records(), CLASSES)
    assert_one_line_error(raised.value, str(path), "the disk is full", "MB are free", "PROBING_STORE_DIR")
    assert not list(tmp_path.iterdir())
