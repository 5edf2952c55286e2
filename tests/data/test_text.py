"""Strict UTF-8 line reading and file hashing."""

from __future__ import annotations

import hashlib

import pytest

from probing.data.text import (
    data_files_read,
    forget_data_files,
    read_lines,
    read_sha256sum_listing,
    sha256_file,
    sha256sum_listing,
)
from probing.errors import DataFormatError


def test_read_lines_numbers_from_one_and_strips_newlines(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("\ufeffalpha\r\n\nbeta gamma\nlast".encode("utf-8"))
    assert list(read_lines(path)) == [(1, "alpha"), (2, ""), (3, "beta gamma"), (4, "last")]


def test_read_lines_keeps_non_ascii_utf8(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("café\nZürich\n", encoding="utf-8")
    assert [line for _, line in read_lines(path)] == ["café", "Zürich"]


def test_invalid_utf8_names_file_line_and_byte_column(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"fine\nalso fine\ncaf\xe9 au lait\n")
    with pytest.raises(DataFormatError) as caught:
        list(read_lines(path))
    error = caught.value
    assert (error.path, error.line) == (str(path), 3)
    assert "byte 0xe9 at byte column 4" in error.problem
    assert "iconv -f latin1 -t utf-8" in error.fix


def test_lines_before_a_bad_byte_are_yielded(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"one\n\xff\n")
    lines = read_lines(path)
    assert next(lines) == (1, "one")
    with pytest.raises(DataFormatError, match=":2:"):
        next(lines)


def test_missing_file_names_the_config_key(tmp_path):
    with pytest.raises(DataFormatError) as caught:
        list(read_lines(tmp_path / "nope.txt", config_key="data.corpus"))
    assert caught.value.line is None
    assert caught.value.problem == "file not found"
    assert "data.corpus" in caught.value.fix


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(DataFormatError, match="is a directory"):
        list(read_lines(tmp_path, config_key="data.paths"))


def test_sha256_file_matches_hashlib_across_chunks(tmp_path):
    path = tmp_path / "blob.bin"
    data = bytes(range(256)) * 10
    path.write_bytes(data)
    assert sha256_file(path, chunk_bytes=100) == hashlib.sha256(data).hexdigest()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert sha256_file(empty) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_sha256_file_sees_a_rewritten_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"first version\n")
    first = sha256_file(path)
    path.write_bytes(b"second version, longer\n")
    assert sha256_file(path) == hashlib.sha256(b"second version, longer\n").hexdigest() != first


def test_the_files_a_job_reads_are_noted_once_each_in_reading_order(tmp_path):
    first, second = tmp_path / "b.txt", tmp_path / "a.txt"
    for path in (first, second):
        path.write_text("x\n", encoding="utf-8")
    forget_data_files()
    for path in (first, second, first):
        list(read_lines(path))
    assert data_files_read() == [str(first.resolve()), str(second.resolve())]
    forget_data_files()
    assert data_files_read() == []


def test_a_sha256sum_listing_reads_back_and_a_line_of_another_form_is_named(tmp_path):
    for name, data in (("a.bin", b"first"), ("b c.json", b"{}")):
        (tmp_path / name).write_bytes(data)
    listing = tmp_path / "files.sha256"
    listing.write_text(sha256sum_listing([tmp_path / "a.bin", tmp_path / "b c.json"]))
    assert listing.read_text().splitlines()[0] == f"{hashlib.sha256(b'first').hexdigest()}  a.bin"  # sha256sum's
    assert read_sha256sum_listing(listing) == {"a.bin": hashlib.sha256(b"first").hexdigest(),
                                               "b c.json": hashlib.sha256(b"{}").hexdigest()}
    listing.write_text(listing.read_text() + "not a hash  c.txt\n")
    with pytest.raises(ValueError, match="line 3 is not `<SHA-256>  <file name>`"):
        read_sha256sum_listing(listing)
