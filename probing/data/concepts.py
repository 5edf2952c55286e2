"""The concept that an eraser removes from a representation (`erase.concept`): the labels of a word task, read from the
probed task's own data, so that both are measured on the same corpus.

See docs/erasure.md, 'The concept (`erase.concept`)'.
"""

from __future__ import annotations

from collections.abc import Sequence

from probing.data.settings import path_list
from probing.data.word_tasks import Conll2003WordTask, ConlluWordTask, WordTaskData, read_word_task
from probing.errors import ConfigError, setting, settings_named

CONLLU_CONCEPTS = ("upos", "xpos", "deprel")
CONCEPTS = (*CONLLU_CONCEPTS, "ner")  # of `concept_task`
CONCEPT_PATHS = "analysis.concept_paths"  # where the amnesic analysis's concept files are set (`read_concept`)


def concept_source(concept: str | None, task_name: str, task_source: object) -> object:
    """The word-task source of `concept` for a run probing `task_name` from `task_source` (see the module
    docstring)."""
    if concept is None or concept == task_name:
        return task_source
    if isinstance(task_source, ConlluWordTask) and concept in CONLLU_CONCEPTS:
        return ConlluWordTask(column=concept, paths=task_source.paths, splits=task_source.splits,
                              dev_fraction=task_source.dev_fraction, seed=task_source.seed)
    columns = [column for column in CONLLU_CONCEPTS if column != task_name]
    others = f", or another column: {', '.join(columns)}" if isinstance(task_source, ConlluWordTask) else ""
    name = setting("concept")
    raise ConfigError(f"{name}={concept} has no data in task={task_name}'s corpus: a concept is the probed "
                      f"task's own labels or, on CoNLL-U data, one of its columns. Fix: {name}={task_name}{others}")


def concept_task(concept: str, paths: str | Sequence[str] | None) -> object:
    """The word-task source of `concept` read from `paths` (a path or a list of paths, as every concept takes them):
    a CoNLL-U column (None: the bundled EWT sample; deprel labels each word with its own DEPREL, so the root word is
    no example), or CoNLL-2003's entity types from the one folder of `paths` (None: the Hugging Face dataset,
    online)."""
    key, name = setting("paths"), setting("concept")
    listed = None if paths is None else [str(path) for path in path_list(key, paths)]
    if concept in CONLLU_CONCEPTS:
        return ConlluWordTask(column=concept, paths=listed)
    if concept == "ner":
        if listed is not None and len(listed) > 1:
            raise ConfigError(f"{key}={listed}: {name}=ner reads one CoNLL-2003 folder (train.txt, valid.txt[, "
                              f"test.txt]), not {len(listed)} paths. Fix: {key}=/path/to/conll2003")
        return Conll2003WordTask(data_dir=None if listed is None else listed[0])
    raise ConfigError(f"{name}={concept} has no data of its own. Fix: {name}=upos (one of {', '.join(CONCEPTS)})")


def read_concept(source: object, concept: str) -> WordTaskData:
    """The word task of a `concept_task` source; its errors name CONCEPT_PATHS where the source's name the settings
    of probe.py's data (data.data_dir, data.source.paths)."""
    with settings_named({"data.data_dir": CONCEPT_PATHS, "data.source.paths": CONCEPT_PATHS}):
        return read_word_task(source, concept)
