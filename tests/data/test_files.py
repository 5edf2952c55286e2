"""probing/data/files.py: files written whole or not at all."""

from __future__ import annotations

import json
import os

import pytest

from probing.data.files import write_json_atomically


def test_results_are_written_whole_and_replace_the_previous_file(tmp_path):
    path = tmp_path / "run" / "results.json"
    write_json_atomically(path, {"a": 1})
    write_json_atomically(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2} and path.read_text().endswith("}\n")
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]  # no temporary file left behind


def test_a_write_stopped_midway_leaves_the_previous_results(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    write_json_atomically(path, {"a": 1})

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        write_json_atomically(path, {"a": 2, "long": "x" * 10_000})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
