"""Feature store: layout, round trip, metadata refusal, unreadable files, checksums and non-finite features; each
test with the tables handled whole and in pieces."""

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
from probing.features.store import (
    RECORD_TABLES,
    SEALED_TABLES,
    STORE_FORMAT,
    FeatureStore,
    StoreWriter,
    all_finite,
    block_groups,
    read_checked_tables,
    read_tables,
    record_order,
    records_fingerprint,
    store_path,
    table_hashes,
)
from tests.helpers.stores import (
    CLASSES,
    DIM,
    LAYERS,
    as_format_3,
    assert_one_line_error,
    assert_same_store,
    features_of,
    make_records,
    metadata,
    small_table_pieces,
    store_tables,
    write_complete_store,
)


@pytest.fixture(autouse=True, params=["whole tables", "pieces of 2 rows"])
def table_pieces(request, monkeypatch):
    """Every test twice: the toy split's tables in one piece, and in pieces of two rows (as a store of more than
    TABLE_ROWS rows has them), where the writer's checks, rewrites and seal must come out the same."""
    if request.param == "pieces of 2 rows":
        small_table_pieces(monkeypatch, 2)


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
        assert handle.attrs["store_format"] == STORE_FORMAT == 4
        assert handle["block_rows"].shape == (10,) and handle["block_xxh3"].shape == (10, LAYERS)
        assert handle["table_xxh3"][()].tolist() == [0] * len(SEALED_TABLES)  # sealed when the store completes
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
    monkeypatch.setattr("probing.features.store.reader.READ_GROUP_BYTES", group_bytes)
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
    monkeypatch.setattr("probing.features.store.metadata.code_version", lambda: "99.0")
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
    with h5py.File(path, "r+") as handle:  # an inf with matching checksums: damage no checksum can see
        layer = handle["features"][2]
        layer[1, 3] = np.inf
        handle["features"][2] = layer
        first = len(batches[0])
        handle["block_xxh3"][0, 2] = xxhash.xxh3_64_intdigest(layer[0:first].tobytes())
        handle["table_xxh3"][:] = table_hashes(read_tables(handle))
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
    as_format_3(path)
    with FeatureStore(path) as store:
        with pytest.raises(StoreMismatchError) as raised:
            store.check_metadata(metadata(10))
        assert "store_format: store has 3, request has 4" in str(raised.value)
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


@pytest.mark.parametrize("table", ["skipped", "words"])
def test_a_store_missing_a_table_is_refused(tmp_path, table):
    path = write_complete_store(tmp_path / "split.h5")
    with h5py.File(path, "r+") as handle:
        del handle[table]
        handle["written"][0] = 0  # unfinished too: the writer refuses it as well
    for open_store in (lambda: FeatureStore(path).read_layer(0), lambda: StoreWriter(path)):
        with pytest.raises(StoreCorruptError) as raised:
            open_store()
        assert_one_line_error(raised.value, str(path), f"no `{table}` table", "Fix: delete the file")


def test_a_store_larger_than_the_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: SimpleNamespace(total=10**9, used=10**9 - 100, free=100))
    path = tmp_path / "split.h5"
    with pytest.raises(ProbingError) as raised:
        FeatureStore.create(path, metadata(10), make_records(), CLASSES)
    assert_one_line_error(raised.value, str(path), "the disk is full", "MB are free", "PROBING_STORE_DIR")
    assert not list(tmp_path.iterdir())


def roll(values: np.ndarray) -> np.ndarray:
    return np.roll(values, 7, axis=0)


def change_first(values: np.ndarray) -> np.ndarray:
    changed = values.copy()
    changed[0] = values[1] if len(values) > 1 and not np.array_equal(values[0], values[1]) else values[0] + 1
    return changed


ALTERATIONS = {  # table -> a change that keeps its shape and dtype
    "labels": roll, "word_ids": roll, "combination_ids": roll, "slots": roll, "block_rows": roll,
    "block_xxh3": roll, "skipped": roll, "combinations": change_first,
    "written": lambda values: values * 2,  # still "complete", but not what was sealed
    "class_names": lambda values: values[::-1], "words": lambda values: values[::-1],
}


def test_every_table_but_the_features_is_checked(tmp_path):
    assert set(ALTERATIONS) == set(SEALED_TABLES)


@pytest.mark.parametrize("table", sorted(ALTERATIONS))
def test_an_altered_table_of_a_finished_store_is_refused_naming_it(tmp_path, table):
    """The issue's case: `labels` rolled by 7 rows gave exit 0 and F1 0.0; now every table is sealed."""
    path = tmp_path / "split.h5"
    FeatureStore.create(path, metadata(10), make_records(), CLASSES)
    with StoreWriter(path) as writer:
        writer.mark_skipped([4])
        writer.write_rows([0, 1, 2, 3], features_of([0, 1, 2, 3]))
        writer.write_rows([5, 6, 7, 8, 9], features_of([5, 6, 7, 8, 9]))
    with FeatureStore(path) as store:
        assert store.labels().tolist() == [0, 1, 2, 0, 2, 1, 2, 0, 2]  # intact: every table checks out
    with h5py.File(path, "r+") as handle:
        values = handle[table][()]
        altered = ALTERATIONS[table](values)
        assert not np.array_equal(altered, values)
        handle[table][...] = altered
    accessors = [lambda store: store.labels(), lambda store: store.read_layer(0), lambda store: store.words,
                 lambda store: store.row_ids(), lambda store: store.num_skipped]
    for access in accessors:
        with FeatureStore(path) as store, pytest.raises(StoreCorruptError) as raised:
            access(store)
        assert_one_line_error(raised.value, str(path), f"`{table}` table is damaged", "Fix: delete the file")


def test_a_run_killed_between_sealing_and_the_last_flags_leaves_an_unfinished_store(store_file, monkeypatch):
    """The seal is written before the last flags: a store whose flags are all set was sealed, and one killed in
    between is unfinished, so the rerun writes its last block again and seals it anew."""
    original, calls = StoreWriter._set_values, []

    def killed_at_the_last_flags(writer, name, rows, values):
        if name == "written" and len(rows) == 6:
            calls.append(rows)
            raise KeyboardInterrupt
        original(writer, name, rows, values)

    with StoreWriter(store_file) as writer:
        writer.write_rows([7, 2, 9, 0], features_of([7, 2, 9, 0]))
        monkeypatch.setattr(StoreWriter, "_set_values", killed_at_the_last_flags)
        with pytest.raises(KeyboardInterrupt):
            writer.write_rows([5, 8, 1, 3, 6, 4], features_of([5, 8, 1, 3, 6, 4]))
    monkeypatch.undo()
    with h5py.File(store_file, "r") as handle:
        assert handle["table_xxh3"][()].all() and not handle["written"][()].all()
    with FeatureStore(store_file) as store, pytest.raises(ProbingError, match="unfinished"):
        store.labels()
    with StoreWriter(store_file) as writer:
        assert writer.pending_rows().tolist() == [1, 3, 4, 5, 6, 8]
        writer.write_rows([1, 3, 4, 5, 6, 8], features_of([1, 3, 4, 5, 6, 8]))
    with FeatureStore(store_file) as store:
        np.testing.assert_array_equal(store.read_all_layers(), features_of(range(10)))


@pytest.mark.parametrize("piece_bytes", [8, 24, 1 << 20])  # one slot (of block_rows) a piece, several, all
def test_block_tables_read_in_pieces_hash_and_index_like_the_whole_tables(tmp_path, monkeypatch, piece_bytes):
    monkeypatch.setattr("probing.features.store.hashes.TABLE_PIECE_BYTES", piece_bytes)
    path = write_complete_store(tmp_path / "split.h5", batches=PARTLY_IN_ORDER)
    with h5py.File(path, "r") as handle:
        tables, hashes = read_checked_tables(handle)
        whole = read_tables(handle)
    assert hashes == table_hashes(whole)
    blocks = tables["block_rows"]
    assert whole["block_rows"].tolist() == [2, 0, 3, 0, 0, 1, 4, 0, 0, 0]
    assert [blocks[slot] for slot in range(len(blocks))] == whole["block_rows"].tolist()
    np.testing.assert_array_equal(blocks.checksums_at([0, 2, 5, 6]), whole["block_xxh3"][[0, 2, 5, 6]])


def test_float16_finiteness_is_checked_on_every_bit_pattern():
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.isfinite(patterns)
    assert not finite.all() and all_finite(patterns[finite]) and all_finite(np.zeros((0, 4), np.float16))
    for bad in patterns[~finite][::97]:  # among finite values of both signs
        assert not all_finite(np.array([1.0, -2.0, -0.0, bad, 3.0], np.float16))


def test_slots_must_fill_the_kept_rows_exactly_once():
    np.testing.assert_array_equal(record_order(np.array([2, 0, 1]), Path("s.h5")), [1, 2, 0])
    np.testing.assert_array_equal(record_order(np.arange(4), Path("s.h5")), np.arange(4))
    for damaged in ([0, 0, 1], [0, 1, 3], [-1, 0, 1]):
        with pytest.raises(StoreCorruptError, match="the `slots` table is damaged"):
            record_order(np.array(damaged), Path("s.h5"))


def test_a_request_without_data_files_takes_a_store_whatever_files_it_records(store_file):
    """Every-word stores: the records identify the data, so the request leaves `data_files` out, and a store that
    records them (as earlier versions wrote every store) is reused; a request holding them still compares them."""
    without_files = {key: value for key, value in metadata(10).items() if key != "data_files"}
    FeatureStore(store_file).check_metadata(without_files)
    with pytest.raises(StoreMismatchError, match="data_files: store has"):
        FeatureStore(store_file).check_metadata(metadata(10, data_files={"train.txt": "e" * 64}))
    with pytest.raises(StoreMismatchError, match="pooling: store has 'mean', request has 'last'"):
        FeatureStore(store_file).check_metadata({**without_files, "pooling": "last"})


def test_a_store_without_data_files_is_refused_by_a_request_holding_them(tmp_path):
    records = make_records()
    without_files = {key: value for key, value in metadata(10).items() if key != "data_files"}
    path = FeatureStore.create(tmp_path / "split.h5", without_files, records, CLASSES).path
    with pytest.raises(StoreMismatchError, match="data_files: store has '<missing>'"):
        FeatureStore(path).check_metadata(metadata(10))


def unfinished_store(path: Path, batches=((7, 2, 9, 0), (5, 8))) -> Path:
    """A store of the toy split with only `batches` written, as a run stopped after them leaves it."""
    FeatureStore.create(path, metadata(10), make_records(), CLASSES)
    with StoreWriter(path) as writer:
        for batch in batches:
            writer.write_rows(list(batch), features_of(batch))
    return path


@pytest.mark.parametrize("table", RECORD_TABLES)
def test_a_record_table_damaged_before_the_seal_is_rewritten_from_the_records(tmp_path, table, caplog):
    """The seal would vouch for whatever the table holds when the store completes: the writer makes the tables the
    records determine those of the records again, keeping the rows already written."""
    path, reference = unfinished_store(tmp_path / "split.h5", [(7, 2, 9, 0)]), write_complete_store(tmp_path / "r.h5")
    with h5py.File(path, "r+") as handle:
        handle[table][...] = ALTERATIONS[table](handle[table][()])
    with caplog.at_level(logging.WARNING, logger="probing.features.store"), StoreWriter(path) as writer:
        writer.match_records(make_records(), CLASSES)
        assert writer.pending_rows().tolist() == [1, 3, 4, 5, 6, 8]
        writer.write_rows([5, 8, 1, 3, 6, 4], features_of([5, 8, 1, 3, 6, 4]))
    assert f"{path}: the `{table}` table of this unfinished store did not match its records" in caplog.text
    assert "keeping the 4 rows already written" in caplog.text
    assert_same_store(path, reference)


def test_record_tables_that_match_are_left_as_they_are(tmp_path, caplog):
    path = unfinished_store(tmp_path / "split.h5")
    before = store_tables(path)
    with caplog.at_level(logging.WARNING, logger="probing.features.store"), StoreWriter(path) as writer:
        writer.match_records(make_records(), CLASSES)
    assert caplog.text == ""
    after = store_tables(path)
    assert all(np.array_equal(after[name], before[name]) for name in RECORD_TABLES)


def test_a_record_table_of_another_shape_is_refused(tmp_path):
    path = unfinished_store(tmp_path / "split.h5")
    with h5py.File(path, "r+") as handle:
        del handle["words"]
        handle.create_dataset("words", data=["apple", "pine"], dtype=h5py.string_dtype("utf-8"))
    with StoreWriter(path) as writer, pytest.raises(StoreCorruptError) as raised:
        writer.match_records(make_records(), CLASSES)
    assert_one_line_error(raised.value, str(path), "shape or type of the `words` table", "Fix: delete the file")


def test_a_row_flagged_written_without_a_slot_is_computed_again(tmp_path, caplog):
    """A flag that reached the disk before its slot (a power cut can leave that): sealed as it was, the store held a
    row without features, refused only when read."""
    path = unfinished_store(tmp_path / "split.h5")
    with h5py.File(path, "r+") as handle:
        handle["written"][[1, 6]] = 1
    with caplog.at_level(logging.WARNING, logger="probing.features.store"), StoreWriter(path) as writer:
        assert writer.pending_rows().tolist() == [1, 3, 4, 6]
        writer.write_rows([1, 3, 4, 6], features_of([1, 3, 4, 6]))
    assert f"{path}: records 1, 6 flagged as written but given no slot" in caplog.text
    with FeatureStore(path) as store:
        np.testing.assert_array_equal(store.read_all_layers(), features_of(range(10)))


def clear_flag_of_the_first_block(handle: h5py.File) -> None:
    handle["written"][2] = 0


def skip_a_row_of_the_last_block(handle: h5py.File) -> None:
    handle["skipped"][8] = 1


def give_two_rows_one_slot(handle: h5py.File) -> None:
    handle["slots"][9] = handle["slots"][7]


@pytest.mark.parametrize("damage", [clear_flag_of_the_first_block, skip_a_row_of_the_last_block,
                                    give_two_rows_one_slot])
def test_flags_and_slots_that_disagree_are_refused_before_any_row_is_written(tmp_path, damage):
    """Row 2 unflagged in the first block (the rerun wrote it again past the last slot: IndexError), row 8 flagged
    skipped (its block was rewritten without it: a row silently dropped), two rows in one slot (refused only once
    read)."""
    path = unfinished_store(tmp_path / "split.h5")
    with h5py.File(path, "r+") as handle:
        damage(handle)
        before = {name: handle[name][()] for name in ("written", "slots", "skipped")}
    with pytest.raises(StoreCorruptError) as raised:
        StoreWriter(path)
    assert_one_line_error(raised.value, str(path), "`written`, `skipped` and `slots` tables", "disagree",
                          "Fix: delete the file")
    with h5py.File(path, "r") as handle:
        assert all(np.array_equal(handle[name][()], values) for name, values in before.items())
