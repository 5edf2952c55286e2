"""probing/data/files.py: files written whole or not at all. A write that fails half-way leaves the previous file and
no temporary one; CSV tables and plots go through the same path, plots keeping their format."""

from __future__ import annotations

import csv
import json
import os

import pytest

from probing.data.files import open_atomically, replaced_atomically, write_atomically, write_json_atomically
from probing.report.plots import pyplot, save_figure


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


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "table.csv"
    write_atomically(path, "layer,score\n3,0.5\n")
    with pytest.raises(RuntimeError), open_atomically(path, newline="") as handle:
        csv.writer(handle).writerow(["layer", "score"])
        raise RuntimeError("stopped half-way")
    assert path.read_text() == "layer,score\n3,0.5\n"
    assert [entry.name for entry in tmp_path.iterdir()] == ["table.csv"]


def test_a_complete_write_replaces_the_file(tmp_path):
    path = tmp_path / "new" / "table.csv"
    with open_atomically(path, newline="") as handle:
        csv.writer(handle).writerows([["layer", "score"], [3, 0.5]])
    assert path.read_bytes() == b"layer,score\r\n3,0.5\r\n"  # the csv module's line ends, untranslated
    assert [entry.name for entry in path.parent.iterdir()] == ["table.csv"]


def test_the_temporary_path_keeps_the_suffix_and_the_folder(tmp_path):
    with replaced_atomically(tmp_path / "plot.png") as temporary:
        assert temporary.parent == tmp_path and temporary.suffix == ".png" and temporary.name != "plot.png"
        temporary.write_bytes(b"png")
    assert (tmp_path / "plot.png").read_bytes() == b"png" and not temporary.exists()


@pytest.mark.parametrize("layout", [None, "constrained"])
def test_a_figure_is_saved_in_the_format_its_name_asks_for(tmp_path, layout):
    fig, ax = pyplot().subplots(layout=layout)
    ax.plot([0, 1], [1, 0])
    assert save_figure(fig, tmp_path / "plot.png") and save_figure(fig, tmp_path / "plot.svg")
    assert (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in (tmp_path / "plot.svg").read_bytes()[:500]
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["plot.png", "plot.svg"]


def test_a_file_gets_the_permissions_open_would_give(tmp_path):
    """Not mkstemp's 0600: results and reports stay readable to whoever may read the run folder."""
    old = os.umask(0o022)
    try:
        write_atomically(tmp_path / "report.md", "# report\n")
        with open(tmp_path / "plain.md", "w") as handle:
            handle.write("# report\n")
    finally:
        os.umask(old)
    assert (tmp_path / "report.md").stat().st_mode & 0o777 == (tmp_path / "plain.md").stat().st_mode & 0o777 == 0o644
