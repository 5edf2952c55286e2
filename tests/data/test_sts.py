"""STS readers: SemEval TSV (scores missing for unscored pairs), STS-B CSV (extra fields ignored), errors that name
file and line, one record per sentence in the split "all"."""

from __future__ import annotations

import pytest

from probing.data.sts import StsSource, read_sts_file, split_words
from probing.errors import ConfigError, DataFormatError


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_semeval_pairs_with_and_without_scores(tmp_path):
    path = write(tmp_path / "semeval_sts" / "2015" / "images.test.tsv",
                 ["3.6\tA cat on a branch.\tA cat is high up.", "\tA dog runs.\tA dog is running."])
    pairs = read_sts_file(path)
    assert [(p.score, p.sentence1, p.sentence2) for p in pairs] == [
        (3.6, "A cat on a branch.", "A cat is high up."), (None, "A dog runs.", "A dog is running.")]
    assert pairs[1].source == f"{path}:2"


def test_stsb_lines_with_extra_fields(tmp_path):
    path = write(tmp_path / "stsbenchmark" / "sts-dev.csv",
                 ["main-captions\tMSRvid\t2012test\t0000\t5.000\tA man dances.\tA man is dancing.",
                  "main-news\theadlines\t2015\t0001\t1.5\tOne.\tTwo.\tsource-a\tsource-b"])
    assert [(p.score, p.sentence1, p.sentence2) for p in read_sts_file(path)] == [
        (5.0, "A man dances.", "A man is dancing."), (1.5, "One.", "Two.")]


@pytest.mark.parametrize("line, problem", [("3.6\tonly one sentence", "2 tab-separated fields"),
                                           ("high\ta\tb", "'high' is not a number")])
def test_bad_lines_name_file_and_line(tmp_path, line, problem):
    path = write(tmp_path / "x.tsv", ["1\ta\tb", line])
    with pytest.raises(DataFormatError, match=f"x.tsv:2: .*{problem}"):
        read_sts_file(path)


def test_source_gives_one_record_per_sentence(tmp_path):
    write(tmp_path / "semeval_sts" / "2012" / "a.tsv", ["1\tA b.\tC d."])
    write(tmp_path / "semeval_sts" / "2013" / "b.tsv", ["\tE f.\tA b."])
    write(tmp_path / "stsbenchmark" / "sts-dev.csv", ["g\tf\ty\t0\t2\tNot read.\tNot read."])
    data = StsSource(str(tmp_path)).load()
    assert list(data.splits) == ["all"]
    assert [(r.text, r.label) for r in data.splits["all"]] == [("A b.", "1.0"), ("C d.", "1.0"), ("E f.", ""),
                                                               ("A b.", "")]
    assert len(data.files) == 2
    assert len(StsSource(str(tmp_path), patterns="stsbenchmark/*.csv").load().splits["all"]) == 2


def test_source_settings_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="data_dir is not set"):
        StsSource(None)
    with pytest.raises(ConfigError, match="^data_dir=.*missing is not a folder"):
        StsSource(str(tmp_path / "missing")).load()
    with pytest.raises(ConfigError, match=r"matches \[.*\]\. Fix: patterns=\['semeval_sts"):
        StsSource(str(tmp_path)).load()


def test_split_words():
    assert split_words("A panda dog's running (fast) -- isn't it?") == (
        "A", "panda", "dog's", "running", "(", "fast", ")", "-", "-", "isn't", "it", "?")


def test_the_real_files(shared_data):
    data = StsSource(str(shared_data / "sts")).load()
    assert len(data.files) == 25 and len(data.splits["all"]) == 2 * 26775
