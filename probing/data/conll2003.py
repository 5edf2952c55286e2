"""CoNLL-2003 English NER (Tjong Kim Sang & De Meulder 2003) as word-in-context data: one record per entity mention.

Files: "WORD POS CHUNK NER" per line, IOB2 tags over PER/LOC/ORG/MISC, blank lines between sentences,
"-DOCSTART-" lines between documents. The same mention extraction serves the files and the Hugging Face
dataset. Mentions are found with seqeval's chunker, which also accepts IOB1-style input: an I-X that does
not continue an X mention starts a new one, and each such mention is counted in the SkipCounter.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from probing.data.records import SkipCounter, WordInContext
from probing.data.text import read_lines
from probing.errors import DataFormatError

ENTITY_TYPES = ("PER", "LOC", "ORG", "MISC")
N_COLUMNS = 4
DOCSTART = "-DOCSTART-"
SKIP_I_WITHOUT_B = "I- tag without B-, treated as mention start"
DATA_DIR_FIX = "set `data.data_dir` to a folder with the CoNLL-2003 files train.txt, valid.txt and test.txt"
EMPTY_FILE_FIX = "give a file with one token per line (WORD POS CHUNK NER), or leave it out of data.source.files"


def mentions_from_tagged_sentence(
    tokens: Sequence[str], tags: Sequence[str], source: str, skips: SkipCounter | None = None
) -> list[WordInContext]:
    """One record per entity mention of a tagged sentence; word = mention tokens lower-cased, joined by "_".

    `tags` must already be valid ("O", "B-X" or "I-X" with X in ENTITY_TYPES); `source` becomes each
    record's source. Mentions opened by an I- tag are counted in `skips` when given.
    """
    # Imported here: seqeval.metrics pulls in scikit-learn, which only CoNLL-2003 loading needs.
    from seqeval.metrics.sequence_labeling import get_entities

    records = []
    for entity_type, start, end in get_entities(list(tags)):
        if tags[start].startswith("I-") and skips is not None:
            skips.skip(SKIP_I_WITHOUT_B, f"{source} token {start + 1}")
        word = "_".join(token.lower() for token in tokens[start : end + 1])
        records.append(WordInContext(tuple(tokens), tuple(range(start, end + 1)), word, entity_type, source))
    return records


def read_conll2003(
    paths: list[str | Path], config_key: str = "data.data_dir"
) -> tuple[list[WordInContext], SkipCounter]:
    """All mentions of the files, in file order; each record's source is the file and first line of its sentence.

    A file without any token line (empty, or only blank and -DOCSTART- lines) is a DataFormatError naming it."""
    records: list[WordInContext] = []
    skips = SkipCounter()
    for path in paths:
        n_sentences = 0
        for first_line, tokens, tags in _read_sentences(path, config_key):
            n_sentences += 1
            records.extend(mentions_from_tagged_sentence(tokens, tags, f"{path}:{first_line}", skips))
        if not n_sentences:
            problem = "no token lines: the file is empty or holds only blank and -DOCSTART- lines"
            raise DataFormatError(path, None, problem, EMPTY_FILE_FIX)
    return records, skips


def _read_sentences(path: str | Path, config_key: str) -> Iterator[tuple[int, list[str], list[str]]]:
    """(first line number, tokens, NER tags) per sentence, with the tags validated."""
    first_line, tokens, tags = 0, [], []
    for number, line in read_lines(path, config_key):
        columns = line.split()
        if not columns or columns[0] == DOCSTART:
            if tokens:
                yield first_line, tokens, tags
            first_line, tokens, tags = 0, [], []
            continue
        if len(columns) != N_COLUMNS:
            raise DataFormatError(
                path, number, f"expected {N_COLUMNS} space-separated columns (WORD POS CHUNK NER), got {len(columns)}",
                "one token per line with its POS, chunk and NER tags; a blank line between sentences",
            )
        _check_tag(columns[3], path, number)
        first_line = first_line or number
        tokens.append(columns[0])
        tags.append(columns[3])
    if tokens:
        yield first_line, tokens, tags


def _check_tag(tag: str, path: str | Path, number: int | None) -> None:
    prefix, _, entity_type = tag.partition("-")
    if tag != "O" and (prefix not in ("B", "I") or entity_type not in ENTITY_TYPES):
        raise DataFormatError(
            path, number, f"unknown NER tag {tag!r}",
            f"use IOB tags O, B-X or I-X with X in {', '.join(ENTITY_TYPES)}",
        )


def load_conll2003_from_hub(name: str = "conll2003") -> tuple[list[WordInContext], SkipCounter]:
    """All mentions of every split of a Hugging Face CoNLL-2003 dataset (columns `tokens`, `ner_tags`).

    The integer `ner_tags` are mapped to tag strings through the dataset's own ClassLabel names.
    Each record's source is "name:split:row".
    """
    dataset = _load_hub_dataset(name)
    records: list[WordInContext] = []
    skips = SkipCounter()
    for split_name, split in dataset.items():
        tag_names = split.features["ner_tags"].feature.names
        for row, example in enumerate(split):
            tags = [tag_names[index] for index in example["ner_tags"]]
            source = f"{name}:{split_name}:{row}"
            for tag in tags:
                _check_tag(tag, source, None)
            records.extend(mentions_from_tagged_sentence(example["tokens"], tags, source, skips))
    return records, skips


def _load_hub_dataset(name: str):
    import datasets

    try:
        return datasets.load_dataset(name)
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as error:
        problem = f"cannot load the dataset {name!r} from the Hugging Face hub ({error})"
        raise DataFormatError(name, None, problem, DATA_DIR_FIX) from None


def conll2003_paths(data_dir: str | Path, files: Sequence[str | Path]) -> list[Path]:
    """The CoNLL-2003 files in `data_dir`; a missing folder or file is reported with the fix."""
    paths = [Path(data_dir) / name for name in files]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise DataFormatError(data_dir, None, f"missing CoNLL-2003 files {missing}", DATA_DIR_FIX)
    return paths
