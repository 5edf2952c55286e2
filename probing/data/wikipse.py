"""Readers for Wiki-PSE (Yaghoobzadeh et al. 2019): s-class inventory, word lists, annotated corpus.

Formats (github yyaghoobzadeh/WIKI-PSE, dataset/):
- semantic_classes.txt: "-location 12152872" per line (class, corpus count).
- train.tsv / test.tsv: "@apple@<TAB>-organization=1652 -food=117" (word, its s-classes with frequencies).
- corpus: one context per line, whitespace tokens; annotated occurrences are written "@apple@-organization",
  multiword names joined by "_" ("@new_york@-location").
"""

from __future__ import annotations

import re
from pathlib import Path

from probing.data.records import RecordTable, RecordTableBuilder, SkipCounter
from probing.data.text import read_lines
from probing.errors import DataFormatError

ANNOTATION = re.compile(r"^@(.+)@-(.+)$")
# A token that starts like an annotation ("@name@..."); it must then match ANNOTATION exactly.
ANNOTATION_START = re.compile(r"^@[^@]+@")
LISTED_WORD = re.compile(r"^@(.+)@$")
LISTED_CLASS = re.compile(r"^-(.+)=(.*)$")

ANNOTATION_FIX = 'annotated occurrences are written "@word@-sclass", e.g. "@apple@-organization"'
SKIP_EMPTY = "empty line"
SKIP_UNLISTED = "annotated word in neither train.tsv nor test.tsv"
SKIP_EMPTY_NAME = "word list line with an empty name"
EMPTY_NAME_PREFIX = "@@\t"
EMPTY_LIST_FIX = "give the Wiki-PSE file as distributed (data.lists_dir: semantic_classes.txt, train.tsv, test.tsv)"
EMPTY_CORPUS_FIX = "set data.corpus to Wiki-PSE's annotated corpus (word_sclass/corpus.txt), one context per line"


def read_sclasses(path: str | Path, config_key: str = "data.lists_dir") -> list[str]:
    """The s-classes of semantic_classes.txt in file order, without the leading "-" ("location")."""
    classes = []
    for number, line in read_lines(path, config_key):
        parts = line.split()
        if len(parts) != 2 or not parts[0].startswith("-") or len(parts[0]) < 2 or not parts[1].isdigit():
            problem = f"expected '-sclass count', got {line!r}"
            raise DataFormatError(path, number, problem, 'write e.g. "-location 12152872"')
        classes.append(parts[0][1:])
    if not classes:
        raise DataFormatError(path, None, "no s-class lines: the file is empty", EMPTY_LIST_FIX)
    return classes


def read_word_list(path: str | Path, classes: list[str], config_key: str = "data.lists_dir",
                   skips: SkipCounter | None = None) -> dict[str, dict[str, int]]:
    """word -> {s-class: corpus frequency} from a Wiki-PSE train.tsv/test.tsv, in file order.

    The distributed train.tsv has one line with an empty name ("@@", line 42253); it is skipped and counted in
    `skips` (without which Table 2's 35,399 + 8,850 training words would be one more). A list without any word
    line is a DataFormatError naming it."""
    known = set(classes)
    words: dict[str, dict[str, int]] = {}
    for number, line in read_lines(path, config_key):
        if line.startswith(EMPTY_NAME_PREFIX):
            (skips or SkipCounter()).skip(SKIP_EMPTY_NAME, f"{path}:{number}")
            continue
        word, sclasses = _parse_word_line(line, known, path, number)
        if word in words:
            raise DataFormatError(path, number, f"word {word!r} is listed twice", "keep one line per word")
        words[word] = sclasses
    if not words:
        problem = "no word lines: the file is empty or lists only the empty name"
        raise DataFormatError(path, None, problem, EMPTY_LIST_FIX)
    return words


def read_disjoint_lists(
    train_path: Path, test_path: Path, classes: list[str], skips: SkipCounter, config_key: str = "data.lists_dir"
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """train.tsv and test.tsv, refusing a word listed in both (Wiki-PSE's split is word-disjoint)."""
    train_words = read_word_list(train_path, classes, config_key, skips)
    test_words = read_word_list(test_path, classes, config_key, skips)
    shared = sorted(set(train_words) & set(test_words))
    if shared:
        raise DataFormatError(
            test_path, None, f"{len(shared)} words are also in train.tsv (e.g. {shared[0]!r})",
            "use word-disjoint train.tsv/test.tsv, as distributed with Wiki-PSE",
        )
    return train_words, test_words


def _parse_word_line(line: str, known: set[str], path: str | Path, number: int) -> tuple[str, dict[str, int]]:
    fix = 'write "@word@<TAB>-sclass1=freq1 -sclass2=freq2", e.g. "@quorn@\t-location=54 -organization=25"'
    fields = line.split("\t")
    word_match = LISTED_WORD.match(fields[0])
    if len(fields) != 2 or word_match is None or not fields[1].split():
        raise DataFormatError(path, number, f"malformed word-list line {line!r}", fix)
    sclasses = {}
    for item in fields[1].split():
        class_match = LISTED_CLASS.match(item)
        if class_match is None:
            raise DataFormatError(path, number, f"malformed s-class entry {item!r}", fix)
        sclass, frequency = class_match.groups()
        if sclass not in known:
            raise DataFormatError(path, number, f"unknown s-class {sclass!r}", "use a class of semantic_classes.txt")
        if not frequency.isdigit():
            problem = f"frequency {frequency!r} of {sclass!r} is not a non-negative integer"
            raise DataFormatError(path, number, problem, fix)
        sclasses[sclass] = int(frequency)
    return word_match.group(1), sclasses


def read_corpus(
    path: str | Path, classes: list[str], word_split: dict[str, str], config_key: str = "data.corpus"
) -> tuple[RecordTable, SkipCounter]:
    """One record per annotated occurrence in the annotated corpus.

    `word_split` maps every listed word (train.tsv and test.tsv) to its split; occurrences of other
    words are skipped and counted, as are empty lines. In each record the other annotated tokens of
    the line appear as their plain words. A token starting like an annotation ("@name@...") must be
    a well-formed one with a known s-class; a lone "@" or an e-mail address is ordinary text. A corpus
    without any non-empty line is a DataFormatError naming it.
    """
    known = set(classes)
    records = RecordTableBuilder()
    skips = SkipCounter()
    n_contexts = 0
    for number, line in read_lines(path, config_key):
        where = f"{path}:{number}"
        if not line.strip():
            skips.skip(SKIP_EMPTY, where)
            continue
        n_contexts += 1
        tokens, annotations = _expand_line(line.split(), known, path, number)
        for word, sclass, target in annotations:
            if word not in word_split:
                skips.skip(SKIP_UNLISTED, where)
                continue
            records.add(tokens, target, word, sclass, where)
    if not n_contexts:
        problem = "no context lines: the file is empty or holds only blank lines"
        raise DataFormatError(path, None, problem, EMPTY_CORPUS_FIX)
    return records.build(), skips


def _expand_line(
    raw_tokens: list[str], known: set[str], path: str | Path, number: int
) -> tuple[tuple[str, ...], list[tuple[str, str, tuple[int, ...]]]]:
    """Plain tokens of a line (multiword names split at "_") and its (word, sclass, target) annotations."""
    tokens: list[str] = []
    annotations = []
    for raw in raw_tokens:
        parsed = _parse_annotation(raw, known, path, number)
        if parsed is None:
            tokens.append(raw)
            continue
        name, sclass = parsed
        start = len(tokens)
        tokens.extend(name.split("_"))
        annotations.append((name.lower(), sclass, tuple(range(start, len(tokens)))))
    return tuple(tokens), annotations


def _parse_annotation(token: str, known: set[str], path: str | Path, number: int) -> tuple[str, str] | None:
    """(name, sclass) of an annotated token, None for ordinary text, an error for a malformed annotation."""
    if ANNOTATION_START.match(token) is None:
        return None
    match = ANNOTATION.match(token)
    if match is None or "" in match.group(1).split("_"):
        raise DataFormatError(path, number, f"malformed annotation {token!r}", ANNOTATION_FIX)
    name, sclass = match.groups()
    if sclass not in known:
        problem = f"unknown s-class {sclass!r} in {token!r}"
        raise DataFormatError(path, number, problem, "use a class of semantic_classes.txt")
    return name, sclass
