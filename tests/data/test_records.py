"""The compact record table: records built on demand, sentences stored once, tables taken without copying buffers."""

from __future__ import annotations

import numpy as np
import pytest

from probing.data.records import RecordTable, RecordTableBuilder, WordInContext, split_source


def two_sentence_table() -> RecordTable:
    builder = RecordTableBuilder()
    sentence = ("she", "eats", "new", "york", "apples")
    builder.add(sentence, (2, 3), "new_york", "location", "corpus.txt:3")
    builder.add(list(sentence), [4], "apples", "food", "corpus.txt:3")  # the same sentence, given as a list
    builder.add(("apples", "grow"), (0,), "apples", "plant", "hub:train:12")
    return builder.build()


def test_records_are_built_on_demand_with_every_field():
    table = two_sentence_table()
    assert len(table) == 3
    assert table[0] == WordInContext(("she", "eats", "new", "york", "apples"), (2, 3), "new_york", "location",
                                     "corpus.txt:3")
    assert table[-1] == WordInContext(("apples", "grow"), (0,), "apples", "plant", "hub:train:12")
    assert [record.combination for record in table] == [("new_york", "location"), ("apples", "food"),
                                                        ("apples", "plant")]
    with pytest.raises(IndexError):
        table[3]


def test_consecutive_records_of_one_sentence_share_it():
    table = two_sentence_table()
    assert table.columns["sentence"].tolist() == [0, 0, 1]
    assert len(table.sentences.ids) == 5 + 2 and table.sentences.vocabulary.names.count("apples") == 1
    assert table[0].tokens is table[1].tokens  # one tuple for the records of one sentence, read in turn
    assert table.words.names == ["new_york", "apples"] and table.word_ids.tolist() == [0, 1, 1]


def test_take_and_slices_share_the_buffers_and_keep_the_order():
    table = two_sentence_table()
    taken = table.take([2, 0])
    assert list(taken) == [table[2], table[0]]
    assert taken.sentences is table.sentences and taken.positions is table.positions and taken.words is table.words
    assert table[1:] == [table[1], table[2]] and table[::-1] == list(reversed(list(table)))
    assert RecordTable.from_records(list(table)) == table
    assert RecordTable.from_records(table) is table


@pytest.mark.parametrize("tokens, target, message", [
    ((), (0,), "empty sentence"),
    (("a", "b"), (), "non-empty sorted set"),
    (("a", "b"), (1, 0), "non-empty sorted set"),
    (("a", "b"), (0, 0), "non-empty sorted set"),
    (("a", "b"), (2,), "outside sentence of 2 tokens"),
    (("a", "b"), (-1,), "outside sentence of 2 tokens"),
])
def test_the_builder_refuses_what_the_record_refuses(tokens, target, message):
    with pytest.raises(ValueError, match=message) as from_record:
        WordInContext(tokens, target, "a", "x", "f:1")
    with pytest.raises(ValueError, match=message) as from_builder:
        RecordTableBuilder().add(tokens, target, "a", "x", "f:1")
    assert str(from_builder.value) == str(from_record.value)


@pytest.mark.parametrize("source, parts", [
    ("data/train.txt:12", ("data/train.txt", 12)), ("conll2003:validation:0", ("conll2003:validation", 0)),
    ("toy:01", ("toy:01", -1)), ("sentence 4", ("sentence 4", -1)), ("", ("", -1)), ("f:", ("f:", -1)),
    ("f:١", ("f:١", -1)),  # a non-ASCII digit is no line number
])
def test_sources_are_stored_as_name_and_line_and_read_back_as_written(source, parts):
    assert split_source(source) == parts
    builder = RecordTableBuilder()
    builder.add(("a",), (0,), "a", "x", source)
    assert builder.build()[0].source == source


def test_an_empty_table():
    table = RecordTableBuilder().build()
    assert len(table) == 0 and list(table) == [] and not table and table.word_ids.dtype == np.int32


def test_the_records_fingerprint_of_a_table_is_that_of_its_records_one_json_line_each():
    import hashlib
    import json

    from probing.features.store import records_fingerprint

    builder = RecordTableBuilder()
    builder.add(("Zürich", "“quoted”", "new", "york"), (2, 3), "new_york", "location", "f:1")
    builder.add(("Zürich", "“quoted”", "new", "york"), (0,), "zürich", "location", "f:1")
    builder.add(("a",), (0,), "a", 'we"ird', "f:2")
    table = builder.build()
    digest = hashlib.sha256()
    for record in table:
        line = json.dumps([list(record.tokens), list(record.target), record.word, record.sclass], ensure_ascii=False)
        digest.update(line.encode("utf-8") + b"\n")
    assert records_fingerprint(table) == records_fingerprint(list(table)) == digest.hexdigest()
    assert records_fingerprint(table.take([2, 0])) == records_fingerprint([table[2], table[0]])


def test_reading_every_sentence_leaves_no_memory_behind():
    """Each sentence's tokens are built at their length: tuples built from an iterator are resized, and CPython kept
    the ones they replaced for reuse (about 100 bytes a sentence of a new length, never freed)."""
    import tracemalloc

    builder = RecordTableBuilder()
    for number in range(3000):
        words = [f"w{number % 50}"] * (1 + number % 15)
        builder.add(words, (0,), words[0], "x", f"t:{number}")
    table = builder.build()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for sentence in range(len(table.sentences.offsets) - 1):
            table.sentences.tokens(sentence)
        left = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert left < 20_000, left
