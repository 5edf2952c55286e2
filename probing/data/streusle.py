"""Reader for STREUSLE CoNLL-U-Lex files (Schneider et al.): WordNet supersenses of nouns (and verbs) in context.

See docs/data.md, 'STREUSLE CoNLL-U-Lex files'.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from probing.data.records import RecordTable, RecordTableBuilder, SkipCounter
from probing.data.text import read_lines
from probing.errors import DataFormatError

N_COLUMNS = 19
ID, FORM, SMWE, LEXLEMMA, SS = 0, 1, 10, 12, 13

NOUN_SUPERSENSES = tuple(
    f"n.{name}"
    for name in (
        "ACT ANIMAL ARTIFACT ATTRIBUTE BODY COGNITION COMMUNICATION EVENT FEELING FOOD GROUP LOCATION MOTIVE "
        "NATURALOBJECT OTHER PERSON PHENOMENON PLANT POSSESSION PROCESS QUANTITY RELATION SHAPE STATE SUBSTANCE TIME"
    ).split()
)
VERB_SUPERSENSES = tuple(
    f"v.{name}"
    for name in (
        "body change cognition communication competition consumption contact creation emotion motion perception "
        "possession social stative weather"
    ).split()
)
STREUSLE_FILES = ("streusle.ud_dev.conllulex", "streusle.ud_test.conllulex")

SKIP_VERB = "verb supersense (include_verbs=False)"
SKIP_UNCERTAIN = "supersense '??' (annotator unsure)"
SKIP_EMPTY_SENTENCE = "empty sentence (no token lines)"
NOTE_OTHER_CASE = "supersense written in another case, read as its canonical class (e.g. N.COGNITION as n.COGNITION)"
FORMAT_FIX = "use CoNLL-U-Lex: 19 tab-separated columns, integer token IDs, SS (column 14) a STREUSLE supersense"
EMPTY_FILE_FIX = "give a CoNLL-U-Lex file with at least one sentence, or leave this file out of data.source.paths"
CANONICAL = {name.lower(): name for name in NOUN_SUPERSENSES + VERB_SUPERSENSES}


@dataclass
class _Token:
    """One word line of a sentence (CoNLL-U word lines only)."""

    form: str
    smwe_group: str | None
    lexlemma: str
    supersense: str
    line: int
    written_in_other_case: bool = False


def streusle_classes(include_verbs: bool = False) -> list[str]:
    """The class inventory: the 26 noun supersenses, then the 15 verb ones when `include_verbs`."""
    return list(NOUN_SUPERSENSES) + (list(VERB_SUPERSENSES) if include_verbs else [])


def read_streusle(
    paths: list[str | Path], include_verbs: bool = False, config_key: str = "data.source.paths"
) -> tuple[RecordTable, SkipCounter]:
    """One record per noun-supersense lexical unit (and verb one when `include_verbs`) in the files.

    word = LEXLEMMA lower-cased with spaces as "_" ("salad bar" -> "salad_bar"); the target is every token
    of the unit's strong MWE group, else the token itself. Preposition supersenses (p.*), "`$" and "_"
    are not targets; "??" and, without `include_verbs`, verb supersenses are counted as skips. A file without
    any token line (empty, or only comments and blank lines) is a DataFormatError naming it.
    """
    targets = set(streusle_classes(include_verbs))
    records = RecordTableBuilder()
    skips = SkipCounter()
    for path in paths:
        n_sentences = 0
        for sentence in _read_sentences(path, config_key, skips):
            n_sentences += 1
            _add_sentence_records(records, sentence, targets, path, skips)
        if not n_sentences:
            problem = "no token lines: the file is empty or holds only comments and blank lines"
            raise DataFormatError(path, None, problem, EMPTY_FILE_FIX)
    return records.build(), skips


def _read_sentences(path: str | Path, config_key: str, skips: SkipCounter):
    """Yield each sentence as its list of word-line tokens, leaving out comments, multiword-token lines and empty nodes.

    A sentence block with comments but no token line is counted as the skip "empty sentence"."""
    sentence: list[_Token] = []
    block_start: int | None = None
    for number, line in read_lines(path, config_key):
        if not line.strip():
            if sentence:
                yield sentence
            elif block_start is not None:
                skips.skip(SKIP_EMPTY_SENTENCE, f"{path}:{block_start}")
            sentence, block_start = [], None
            continue
        block_start = number if block_start is None else block_start
        if not line.startswith("#"):
            token = _parse_token_line(line, path, number)
            if token is not None:
                sentence.append(token)
    if sentence:
        yield sentence
    elif block_start is not None:
        skips.skip(SKIP_EMPTY_SENTENCE, f"{path}:{block_start}")


def _parse_token_line(line: str, path: str | Path, number: int) -> _Token | None:
    columns = line.split("\t")
    if len(columns) != N_COLUMNS:
        problem = f"expected {N_COLUMNS} tab-separated columns, got {len(columns)}"
        raise DataFormatError(path, number, problem, FORMAT_FIX)
    token_id = columns[ID]
    if _is_multiword_or_empty_node(token_id):
        return None
    if not token_id.isdigit():
        raise DataFormatError(path, number, f"token ID {token_id!r} is not an integer", FORMAT_FIX)
    supersense = _canonical_supersense(columns[SS], path, number)
    smwe = columns[SMWE]
    if smwe != "_" and not _is_group_position(smwe):
        raise DataFormatError(path, number, f"SMWE {smwe!r} is not 'group:position'", FORMAT_FIX)
    group = smwe.split(":")[0] if smwe != "_" else None
    return _Token(columns[FORM], group, columns[LEXLEMMA], supersense, number, supersense != columns[SS])


def _canonical_supersense(written: str, path: str | Path, number: int) -> str:
    """The canonical spelling of a noun or verb supersense in any case; other SS values (p.*, "_", "??") as written."""
    if written[:2].lower() not in ("n.", "v."):
        return written
    if written.lower() not in CANONICAL:
        raise DataFormatError(path, number, f"unknown supersense {written!r}", FORMAT_FIX)
    return CANONICAL[written.lower()]


def _is_multiword_or_empty_node(token_id: str) -> bool:
    """CoNLL-U multiword-token ranges ("3-4") and empty nodes ("5.1")."""
    for separator in ("-", "."):
        parts = token_id.split(separator)
        if len(parts) == 2 and all(part.isdigit() for part in parts):
            return True
    return False


def _is_group_position(smwe: str) -> bool:
    parts = smwe.split(":")
    return len(parts) == 2 and all(part.isdigit() for part in parts)


def _add_sentence_records(
    records: RecordTableBuilder, sentence: list[_Token], targets: set[str], path: str | Path, skips: SkipCounter
) -> None:
    forms = tuple(token.form for token in sentence)
    for position, token in enumerate(sentence):
        where = f"{path}:{token.line}"
        if token.written_in_other_case:
            skips.skip(NOTE_OTHER_CASE, where)
        if token.supersense in targets:
            word = token.lexlemma.lower().replace(" ", "_")
            records.add(forms, _unit_positions(sentence, position), word, token.supersense, where)
        elif token.supersense in VERB_SUPERSENSES:
            skips.skip(SKIP_VERB, where)
        elif token.supersense == "??":
            skips.skip(SKIP_UNCERTAIN, where)


def _unit_positions(sentence: list[_Token], position: int) -> tuple[int, ...]:
    """Positions of the lexical unit at `position`: its whole strong-MWE group, or the token alone."""
    group = sentence[position].smwe_group
    if group is None:
        return (position,)
    return tuple(i for i, token in enumerate(sentence) if token.smwe_group == group)
