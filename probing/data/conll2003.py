"""CoNLL-2003 English NER (Tjong Kim Sang & De Meulder 2003) as word-in-context data: one record per entity mention.

See docs/data.md, 'CoNLL-2003 files'.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from probing.data.records import RecordTable, RecordTableBuilder, SkipCounter, WordInContext
from probing.data.task_records import HUB_SPLITS, TaggedSentence
from probing.data.text import read_lines
from probing.errors import DataFormatError

ENTITY_TYPES = ("PER", "LOC", "ORG", "MISC")
N_COLUMNS = 4
DOCSTART = "-DOCSTART-"
SKIP_I_WITHOUT_B = "I- tag without B-, treated as mention start"
SKIP_IOB1_TO_IOB2 = "I- tag opening a mention (IOB1), read as B- (IOB2)"
SKIP_HUB_EMPTY_ROW = "hub row without tokens or a -DOCSTART- row, not a sentence"
DATA_DIR_FIX = "set `data.data_dir` to a folder with the CoNLL-2003 files train.txt, valid.txt and test.txt"
EMPTY_FILE_FIX = "give a file with one token per line (WORD POS CHUNK NER), or leave it out of data.source.files"


def mentions_from_tagged_sentence(
    tokens: Sequence[str], tags: Sequence[str], source: str, skips: SkipCounter | None = None
) -> list[WordInContext]:
    """One record per entity mention of a tagged sentence; word = mention tokens lower-cased, joined by "_".

    `tags` must already be valid ("O", "B-X" or "I-X" with X in ENTITY_TYPES); `source` becomes each
    record's source. Mentions opened by an I- tag are counted in `skips` when given.
    """
    records = RecordTableBuilder()
    add_mentions(records, tokens, tags, source, skips)
    return list(records.build())


def add_mentions(records: RecordTableBuilder, tokens: Sequence[str], tags: Sequence[str], source: str,
                 skips: SkipCounter | None = None) -> None:
    """Add the mentions of a tagged sentence to `records` (see mentions_from_tagged_sentence)."""
    # Imported here: seqeval.metrics pulls in scikit-learn, which only CoNLL-2003 loading needs.
    from seqeval.metrics.sequence_labeling import get_entities

    tokens = tuple(tokens)
    for entity_type, start, end in get_entities(list(tags)):
        if tags[start].startswith("I-") and skips is not None:
            skips.skip(SKIP_I_WITHOUT_B, f"{source} token {start + 1}")
        word = "_".join(token.lower() for token in tokens[start : end + 1])
        records.add(tokens, tuple(range(start, end + 1)), word, entity_type, source)


def read_conll2003(
    paths: list[str | Path], config_key: str = "data.data_dir"
) -> tuple[RecordTable, SkipCounter]:
    """All mentions of the files, in file order; each record's source is the file and first line of its sentence.

    A file without any token line (empty, or only blank and -DOCSTART- lines) is a DataFormatError naming it."""
    records = RecordTableBuilder()
    skips = SkipCounter()
    for path in paths:
        n_sentences = 0
        for first_line, tokens, tags in _read_sentences(path, config_key):
            n_sentences += 1
            add_mentions(records, tokens, tags, f"{path}:{first_line}", skips)
        if not n_sentences:
            problem = "no token lines: the file is empty or holds only blank and -DOCSTART- lines"
            raise DataFormatError(path, None, problem, EMPTY_FILE_FIX)
    return records.build(), skips


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


def load_conll2003_from_hub(name: str = "conll2003") -> tuple[RecordTable, SkipCounter]:
    """All mentions of every split of a Hugging Face CoNLL-2003 dataset (columns `tokens`, `ner_tags`).

    The integer `ner_tags` are mapped to tag strings through the dataset's own ClassLabel names.
    Each record's source is "name:split:row".
    """
    dataset = _load_hub_dataset(name)
    records = RecordTableBuilder()
    skips = SkipCounter()
    for split_name, split in dataset.items():
        tag_names = split.features["ner_tags"].feature.names
        for row, example in enumerate(split):
            tags = [tag_names[index] for index in example["ner_tags"]]
            source = f"{name}:{split_name}:{row}"
            for tag in tags:
                _check_tag(tag, source, None)
            add_mentions(records, example["tokens"], tags, source, skips)
    return records.build(), skips


def _load_hub_dataset(name: str):
    import datasets

    try:
        return datasets.load_dataset(name)
    # RuntimeError: a repository that still holds a loading script, which `datasets` no longer runs
    except (OSError, ValueError, RuntimeError, datasets.exceptions.DatasetsError) as error:
        problem = f"cannot load the dataset {name!r} from the Hugging Face hub ({error})"
        raise DataFormatError(name, None, problem, DATA_DIR_FIX) from None


def conll2003_paths(data_dir: str | Path, files: Sequence[str | Path], fix: str = DATA_DIR_FIX) -> list[Path]:
    """The CoNLL-2003 files in `data_dir`; a missing folder or file is reported with the `fix`."""
    paths = [Path(data_dir) / name for name in files]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise DataFormatError(data_dir, None, f"missing CoNLL-2003 files {missing}", fix)
    return paths


def to_iob2(tags: Sequence[str], source: str, skips: SkipCounter) -> tuple[str, ...]:
    """The tags with each I-X that does not continue an X mention rewritten as B-X, each rewrite counted in `skips`.

    IOB2 input comes back unchanged; IOB1 (B- only between adjacent mentions of one type) becomes IOB2."""
    converted = []
    for position, tag in enumerate(tags):
        previous = converted[-1] if converted else "O"
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            skips.skip(SKIP_IOB1_TO_IOB2, f"{source} token {position + 1}")
            tag = "B-" + tag[2:]
        converted.append(tag)
    return tuple(converted)


def read_conll2003_sentences(
    paths: Sequence[str | Path], skips: SkipCounter, config_key: str = "data.data_dir"
) -> list[TaggedSentence]:
    """Every sentence of the files with its IOB2 NER tags; each source is "file:line" of the sentence's first token.

    -DOCSTART- lines are dropped; a tag outside O/B-X/I-X (X in ENTITY_TYPES) or a line without 4 columns is a
    DataFormatError naming its line, and so is a file without any token line."""
    sentences: list[TaggedSentence] = []
    for path in paths:
        before = len(sentences)
        for first_line, tokens, tags in _read_sentences(path, config_key):
            source = f"{path}:{first_line}"
            sentences.append(TaggedSentence(tuple(tokens), to_iob2(tags, source, skips), source))
        if len(sentences) == before:
            problem = "no token lines: the file is empty or holds only blank and -DOCSTART- lines"
            raise DataFormatError(path, None, problem, EMPTY_FILE_FIX)
    return sentences


def load_conll2003_sentences_from_hub(name: str, skips: SkipCounter) -> dict[str, list[TaggedSentence]]:
    """The tagged sentences of a Hugging Face CoNLL-2003 dataset (columns `tokens`, `ner_tags`), by split.

    Hub splits are renamed by HUB_SPLITS (validation -> dev); integer tags go through the dataset's ClassLabel
    names, and each sentence's source is "name:split:row"."""
    dataset = _load_hub_dataset(name)
    splits: dict[str, list[TaggedSentence]] = {}
    for hub_split, split in dataset.items():
        if hub_split not in HUB_SPLITS:
            continue
        tag_names = split.features["ner_tags"].feature.names
        sentences = splits.setdefault(HUB_SPLITS[hub_split], [])
        for row, example in enumerate(split):
            sentence = _hub_sentence(example["tokens"], [tag_names[i] for i in example["ner_tags"]],
                                     f"{name}:{hub_split}:{row}", skips)
            if sentence is not None:
                sentences.append(sentence)
    return splits


def _hub_sentence(tokens: list[str], tags: list[str], source: str, skips: SkipCounter) -> TaggedSentence | None:
    """A hub row as a sentence; a row without tokens, or a -DOCSTART- row, is counted in `skips` and left out."""
    if not tokens or tokens[0] == DOCSTART:
        skips.skip(SKIP_HUB_EMPTY_ROW, source)
        return None
    if len(tags) != len(tokens):
        raise DataFormatError(source, None, f"{len(tokens)} tokens but {len(tags)} NER tags", DATA_DIR_FIX)
    for tag in tags:
        _check_tag(tag, source, None)
    return TaggedSentence(tuple(tokens), to_iob2(tags, source, skips), source)
