"""Static embedding files (word2vec/GloVe text, gzip) and per-word seeded random vectors (Zhao et al. 2020 §4.2.1)."""

from __future__ import annotations

import gzip
import hashlib
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from probing.errors import ConfigError, DataFormatError
from probing.features.static_embeddings import (
    StaticEmbeddings,
    read_static_embeddings,
    seeded_normal_vectors,
    word_seed,
)
from tests.helpers import FIXTURES

FIXTURES = FIXTURES / "embeddings"
WORD2VEC_VECTORS = [[0.1, 0.2, 0.3], [1, -2, 3.5], [0, 0, 1], [-0.5, 0.25, 0]]


def write(tmp_path: Path, text: str, name: str = "vectors.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- seeded random vectors -----------------------------------------------------------------------------------


def test_word_seed_is_a_pinned_64_bit_value_of_seed_and_word():
    # First 8 bytes of sha256(b"0\x00apple"), big-endian: the same in every process and Python version.
    assert word_seed(0, "apple") == int.from_bytes(hashlib.sha256(b"0\x00apple").digest()[:8], "big")
    assert word_seed(0, "apple") == 0x820FA172534F3C1B
    assert word_seed(0, "apple") != word_seed(1, "apple") != word_seed(1, "Apple")
    assert 0 <= word_seed(123, "new_york") < 2**64


def test_seeded_vector_row_is_the_rng_of_the_word_seed():
    vectors = seeded_normal_vectors(["apple", "paris"], dim=5, seed=7)
    assert vectors.shape == (2, 5) and vectors.dtype == np.float32
    expected = np.random.default_rng(word_seed(7, "paris")).standard_normal(5).astype(np.float32)
    np.testing.assert_array_equal(vectors[1], expected)


def test_seeded_vectors_do_not_depend_on_order_or_neighbours():
    words = ["apple", "paris", "the", "new_york"]
    forward = seeded_normal_vectors(words, dim=8, seed=3)
    backward = seeded_normal_vectors(words[::-1], dim=8, seed=3)
    np.testing.assert_array_equal(forward, backward[::-1])
    np.testing.assert_array_equal(seeded_normal_vectors(["the"], dim=8, seed=3)[0], forward[2])
    assert not np.allclose(seeded_normal_vectors(["the"], dim=8, seed=4)[0], forward[2])


def test_seeded_vectors_repeat_a_word_and_are_standard_normal_over_many_draws():
    vectors = seeded_normal_vectors([f"w{i}" for i in range(2000)] + ["w0"], dim=50, seed=0)
    np.testing.assert_array_equal(vectors[0], vectors[-1])
    values = vectors[:-1].ravel()  # 100,000 draws: standard error of the mean 0.003, of the std about 0.002
    assert abs(values.mean()) < 0.015
    assert abs(values.std() - 1.0) < 0.015
    assert seeded_normal_vectors([], dim=4, seed=0).shape == (0, 4)
    with pytest.raises(ValueError, match="dimension must be >= 1"):
        seeded_normal_vectors(["a"], dim=0, seed=0)


# --- reading files -------------------------------------------------------------------------------------------


def test_word2vec_file_with_header():
    embeddings = read_static_embeddings(FIXTURES / "word2vec.txt")
    assert embeddings.name == "word2vec"
    assert embeddings.words == ["apple", "Paris", "new_york", "the"]
    assert embeddings.dim == 3 and embeddings.vectors.dtype == np.float32
    np.testing.assert_allclose(embeddings.vectors, WORD2VEC_VECTORS, rtol=0, atol=1e-7)
    assert embeddings.sha256 == hashlib.sha256((FIXTURES / "word2vec.txt").read_bytes()).hexdigest()


def test_glove_file_without_header_keeps_unicode_words():
    embeddings = read_static_embeddings(FIXTURES / "glove.txt", name="GloVe")
    assert embeddings.name == "GloVe"
    assert embeddings.words == ["apple", "paris", "café"]
    np.testing.assert_allclose(embeddings.vectors, [[0.5, -1.5, 2], [3, 0.125, -4], [0.01, 0, 7]], atol=1e-7)


def test_trailing_spaces_and_tabs_separate_fields():
    embeddings = read_static_embeddings(FIXTURES / "glove_trailing_space.txt")
    assert embeddings.words == ["apple", "paris"]
    np.testing.assert_allclose(embeddings.vectors, [[0.5, -1.5, 2], [3, 0.125, -4]])


def test_gzip_file_reads_like_the_plain_one_and_is_named_without_suffixes(tmp_path):
    gz_path = tmp_path / "glove.6B.3d.txt.gz"
    with (FIXTURES / "word2vec.txt").open("rb") as source, gzip.open(gz_path, "wb") as target:
        shutil.copyfileobj(source, target)
    embeddings = read_static_embeddings(gz_path)
    assert embeddings.name == "glove.6B.3d"
    assert embeddings.words == ["apple", "Paris", "new_york", "the"]
    np.testing.assert_allclose(embeddings.vectors, WORD2VEC_VECTORS, atol=1e-7)


def test_larger_glove_file_grows_its_buffer_and_round_trips(tmp_path):
    vectors = np.random.default_rng(0).standard_normal((66_000, 2)).astype(np.float32)
    lines = (f"w{i} {a!r} {b!r}" for i, (a, b) in enumerate(vectors.tolist()))
    embeddings = read_static_embeddings(write(tmp_path, "\n".join(lines) + "\n"))
    assert len(embeddings.words) == 66_000 and embeddings.words[-1] == "w65999"
    np.testing.assert_array_equal(embeddings.vectors, vectors)


def test_reading_logs_size(caplog):
    with caplog.at_level(logging.INFO, logger="probing.features.static_embeddings"):
        read_static_embeddings(FIXTURES / "word2vec.txt")
    assert "4 words x 3 dims" in caplog.text


# --- errors ---------------------------------------------------------------------------------------------------


def test_missing_file_names_the_setting(tmp_path):
    with pytest.raises(ConfigError, match=r"file not found\. Fix: set `embeddings.static.path`"):
        read_static_embeddings(tmp_path / "nope.txt", config_key="embeddings.static.path")
    with pytest.raises(ConfigError, match="is a directory"):
        read_static_embeddings(tmp_path)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("empty.txt", r"empty\.txt: the file is empty"),
        ("bad_dims.txt", r"bad_dims\.txt:3: line 3 has 2 values, the first row \(line 1\) had 3"),
        ("duplicate_word.txt", r"duplicate_word\.txt:4: 'apple' at line 4 was already defined at line 2\. Fix: keep"),
        ("bad_header.txt", r"bad_header\.txt:1: bad header '3 0': V and D must be positive integers"),
        ("non_numeric.txt", r"non_numeric\.txt:2: value 2 of 'paris' is not a number: 'two'"),
        ("header_words_mismatch.txt", r"says 5 words but the file has 4 word lines\. Fix: set the header's first num"),
        ("header_wrong_dim.txt", r"header_wrong_dim\.txt:2: line 2 has 2 values, the header \(line 1\) says 3\. Fix"),
    ],
)
def test_bad_files_name_the_file_line_and_problem(name, message):
    with pytest.raises(DataFormatError, match=message) as caught:
        read_static_embeddings(FIXTURES / name)
    assert "Fix: " in str(caught.value)


def test_header_with_fewer_words_than_rows(tmp_path):
    path = write(tmp_path, "2 1\napple 1\nparis 2\nthe 3\n")
    with pytest.raises(DataFormatError, match=r":4: the header \(line 1\) says 2 words but line 4 is word 3"):
        read_static_embeddings(path)


def test_non_integer_header_and_one_value_first_row_hint(tmp_path):
    with pytest.raises(DataFormatError, match=r":1: bad header '400000 300\.5'"):
        read_static_embeddings(write(tmp_path, "400000 300.5\napple 1\n"))
    with pytest.raises(DataFormatError, match="line 1 was read as a word with 1 value, not as a header"):
        read_static_embeddings(write(tmp_path, "hundred 300\napple 1 2 3\n"))


def test_empty_line_nan_and_bad_utf8_are_refused(tmp_path):
    with pytest.raises(DataFormatError, match=r":2: line 2 is empty\. Fix: remove empty lines"):
        read_static_embeddings(write(tmp_path, "apple 1 2\n\nparis 3 4\n"))
    with pytest.raises(DataFormatError, match=r":2: the vector of 'paris' has a nan or infinite value"):
        read_static_embeddings(write(tmp_path, "apple 1 2\nparis nan 4\n"))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 1 2\n".encode("latin-1"))
    with pytest.raises(DataFormatError, match=r":1: byte 0xe9 of the word is not valid UTF-8\. Fix: re-encode"):
        read_static_embeddings(latin1)


def test_corrupt_gzip_is_a_data_format_error(tmp_path):
    path = tmp_path / "vectors.txt.gz"
    path.write_bytes(b"apple 1 2\n")
    with pytest.raises(DataFormatError, match=r"vectors\.txt\.gz: cannot be decompressed as gzip"):
        read_static_embeddings(path)


# --- lookup ---------------------------------------------------------------------------------------------------


def make_space() -> StaticEmbeddings:
    return read_static_embeddings(FIXTURES / "word2vec.txt")


def test_lookup_as_given_then_lower_cased():
    space = make_space()
    vectors, oov = space.lookup(["apple", "APPLE", "Paris", "THE", "new_york"], oov_seed=0)
    assert oov == []
    np.testing.assert_allclose(vectors, [WORD2VEC_VECTORS[i] for i in (0, 0, 1, 3, 2)], atol=1e-7)
    # "paris" is not in the file ("Paris" is) and lower-casing "paris" does not help: OOV.
    assert space.lookup(["paris"], oov_seed=0)[1] == ["paris"]


def test_lookup_oov_words_are_counted_once_and_seeded():
    space = make_space()
    words = ["zebra", "apple", "new york", "zebra", "new_york"]
    vectors, oov = space.lookup(words, oov_seed=5)
    assert oov == ["zebra", "new york"]
    np.testing.assert_array_equal(vectors[0], vectors[3])
    np.testing.assert_array_equal(vectors[[0, 2]], seeded_normal_vectors(["zebra", "new york"], 3, seed=5))
    again, _ = space.lookup(["new york", "zebra"], oov_seed=5)
    np.testing.assert_array_equal(again, vectors[[2, 0]])
    other_seed, _ = space.lookup(["zebra"], oov_seed=6)
    assert not np.allclose(other_seed[0], vectors[0])
    assert vectors.dtype == np.float32 and vectors.shape == (5, 3)


def test_lookup_of_no_words():
    vectors, oov = make_space().lookup([], oov_seed=0)
    assert vectors.shape == (0, 3) and oov == []
