"""The concept an eraser removes: the probed task's own labels, or a CoNLL-U column of its corpus; anything else is
refused naming the concepts that have data."""

from __future__ import annotations

from pathlib import Path

import pytest

from probing.data.concepts import concept_source, concept_task, read_concept
from probing.data.word_tasks import ConlluWordTask, JsonlWordTask
from probing.errors import ConfigError, DataFormatError, ProbingError


def test_the_probed_tasks_own_labels_are_its_own_source():
    source = ConlluWordTask(column="upos")
    assert concept_source(None, "upos", source) is source
    assert concept_source("upos", "upos", source) is source


def test_a_conllu_column_reads_the_same_files_splits_and_dev_carve_out():
    task = ConlluWordTask(column="deprel", paths=["a/en-train.conllu", "a/en-dev.conllu"],
                          splits={"train": "*-train.conllu", "test": "*-dev.conllu"}, dev_fraction=0.3, seed=7)
    concept = concept_source("upos", "deprel", task)
    assert isinstance(concept, ConlluWordTask) and concept is not task
    assert (concept.column, concept.name, concept.pair) == ("upos", "upos", False)
    assert (concept.paths, concept.splits, concept.dev_fraction, concept.seed) == (
        task.paths, task.splits, 0.3, 7)


def test_a_concept_without_data_in_the_corpus_is_refused_with_those_that_have():
    with pytest.raises(ConfigError, match=r"^concept=ner has no data in task=upos's corpus.*"
                                          r"Fix: concept=upos, or another column: xpos, deprel$"):
        concept_source("ner", "upos", ConlluWordTask(column="upos"))
    with pytest.raises(ConfigError, match=r"Fix: concept=jsonl$"):
        concept_source("upos", "jsonl", JsonlWordTask(path="mine.jsonl"))


def test_a_concept_read_from_its_own_files_names_their_setting_in_its_errors(tmp_path):
    """The sources' messages name probe.py's data.data_dir / data.source.paths; the amnesic analysis's concept is
    read from analysis.concept_paths."""
    with pytest.raises(DataFormatError, match=r"Fix: set `analysis.concept_paths` to a folder with the CoNLL-2003"):
        read_concept(concept_task("ner", str(tmp_path)), "ner")
    with pytest.raises(ProbingError, match="analysis.concept_paths") as error:
        read_concept(concept_task("upos", [str(tmp_path)]), "upos")
    assert "data." not in str(error.value)


def test_a_concept_takes_a_path_or_a_list_of_paths_whatever_its_data():
    """A list was refused for ner ("must be one path") but taken for the CoNLL-U columns."""
    for paths in ("/data/conll2003", ["/data/conll2003"]):
        assert str(concept_task("ner", paths).data_dir) == "/data/conll2003"
        assert concept_task("upos", paths).paths == [Path("/data/conll2003")]
    with pytest.raises(ConfigError) as error:
        concept_task("ner", ["/data/a", "/data/b"])
    assert str(error.value) == ("paths=['/data/a', '/data/b']: concept=ner reads one CoNLL-2003 "
                                "folder (train.txt, valid.txt[, test.txt]), not 2 paths. "
                                "Fix: paths=/path/to/conll2003")


@pytest.mark.parametrize("paths", ["", [], [3]])
@pytest.mark.parametrize("concept", ["ner", "upos"])
def test_what_is_no_path_is_refused_alike_for_every_concept(concept, paths):
    with pytest.raises(ConfigError, match=r"^paths must .*Fix: paths=\[FILE\]"):
        concept_task(concept, paths)
