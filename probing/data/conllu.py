"""CoNLL-U files (Universal Dependencies): every word line with its 10 columns (`read_conllu_sentences`, read by
the word-level probing tasks of probing.data.word_tasks and the dependency trees of probing.data.trees), and
POS-tagged sentences with the language-specific XPOS tags (`read_conllu_xpos`, for POS fine-tuning), built on the
same word-line parser.

See docs/data.md, 'CoNLL-U and CoNLL-X files'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from probing.data.records import SkipCounter
from probing.data.task_records import TaggedSentence
from probing.data.text import files_in, read_lines
from probing.errors import DataFormatError

N_COLUMNS = 10
ID, FORM, UPOS, XPOS, FEATS, HEAD, DEPREL = 0, 1, 3, 4, 5, 6, 7
SUFFIX = ".conllu"
TREEBANK_SUFFIXES = (SUFFIX, ".conllx", ".conll")  # CoNLL-U and CoNLL-X, the files `treebank_files` finds
SKIP_MULTIWORD = "multiword-token line (e.g. 3-4), its words are read from the lines after it"
SKIP_EMPTY_NODE = "empty node (e.g. 5.1), not a word"
FORMAT_FIX = "use CoNLL-U: 10 tab-separated columns, word IDs 1, 2, 3... per sentence, a blank line after each"
XPOS_FIX = "use a treebank with XPOS tags (column 5), e.g. UD English-EWT, or fill in the missing tag"
EMPTY_FILE_FIX = "give a CoNLL-U file with at least one sentence, or leave it out of data.source.paths"
HEAD_FIX = "HEAD (column 7) must be 0 (root) or the ID of a word of the same sentence"
TREE_FIX = ("give every sentence a dependency tree: each word's chain of HEADs (column 7) must reach the root 0 "
            "without coming back to a word; or probe a task without heads, such as task=upos")
ONE_ROOT_FIX = ("a dependency tree has one root: give exactly one word of each sentence HEAD 0 (column 7) and "
                "the others the ID of their head word")
ROOT = 0  # the HEAD of a sentence's root word
# The 45 Penn Treebank POS tags (Marcus et al. 1993, with -LRB-/-RRB- for brackets, and -LCB-/-RCB- for braces as the
# treebank writes them), and what UD English-EWT adds: ADD (e-mail, web address), AFX (affix), GW (goes-with), HYPH
# (hyphen), NFP (superfluous punctuation), XX (unknown).
PTB_TAGS = frozenset({
    "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS", "NNP", "NNPS", "PDT", "POS",
    "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP",
    "WP$", "WRB", "#", "$", ".", ",", ":", "``", "''", "-LRB-", "-RRB-", "-LCB-", "-RCB-",
})
XPOS_TAGS = PTB_TAGS | {"ADD", "AFX", "GW", "HYPH", "NFP", "XX"}


class ConlluWord(NamedTuple):
    """One word line: its line number in the file and its 10 columns as written (strings, "_" where unset)."""

    line: int
    id: str
    form: str
    lemma: str
    upos: str
    xpos: str
    feats: str
    head: str
    deprel: str
    deps: str
    misc: str


def conllu_files(paths: Sequence[Path], config_key: str = "data.source.paths") -> list[Path]:
    """The CoNLL-U files to read: files as given and each folder's *.conllu files, sorted by name."""
    return files_in(paths, f"*{SUFFIX}", config_key)


def treebank_files(paths: Sequence[Path], config_key: str = "data.source.paths") -> list[Path]:
    """The CoNLL-U and CoNLL-X files to read: files as given and each folder's files ending in TREEBANK_SUFFIXES,
    sorted by name (a folder's other *.conll* files, such as STREUSLE's .conllulex, are not read)."""
    files: list[Path] = []
    for path in paths:
        found = [item for item in files_in([path], "*.conll*", config_key)
                 if path.is_file() or item.suffix in TREEBANK_SUFFIXES]
        if not found:
            patterns = ", ".join(f"*{suffix}" for suffix in TREEBANK_SUFFIXES)
            raise DataFormatError(path, None, f"no {patterns} files in the folder", f"set `{config_key}` to data files")
        files.extend(found)
    return files


def read_conllu_xpos(
    paths: Iterable[Path], skips: SkipCounter, config_key: str = "data.source.paths"
) -> list[TaggedSentence]:
    """The sentences of the files with their XPOS tags, in order; each source is "file:line" of the first word."""
    sentences: list[TaggedSentence] = []
    for path in paths:
        for words in read_conllu_sentences(path, skips, config_key, check=_require_xpos):
            sentence = _xpos_sentence(words, path, skips)
            if sentence is not None:
                sentences.append(sentence)
    return sentences


def skip_unknown_tag(tag: str) -> str:
    """The skip reason of a sentence left out for `tag`."""
    return f"sentence with XPOS tag {tag!r}, outside the Penn Treebank tag set, left out"


def read_conllu_sentences(
    path: Path, skips: SkipCounter, config_key: str = "data.source.paths",
    check: Callable[[ConlluWord, Path], None] | None = None,
) -> Iterator[list[ConlluWord]]:
    """Each sentence of the file as its word lines, all 10 columns as written, in order (streamed).

    Multiword-token lines and empty nodes are counted in `skips` and left out; `check`, when given, is called on
    each word as it is read (to refuse a column a reader needs, at its line). A block without word lines, and a
    file without any sentence, are DataFormatErrors."""
    block_start: int | None = None
    words: list[ConlluWord] = []
    first_token: tuple[int, str] | None = None  # the block's first line that is no word: (number, line)
    n_sentences = 0
    for number, line in read_lines(path, config_key):
        if not line.strip():
            if block_start is not None:
                n_sentences += 1
                yield _checked_block(words, path, block_start, first_token)
            block_start, words, first_token = None, [], None
            continue
        block_start = number if block_start is None else block_start
        if not line.startswith("#"):
            word = parse_word_line(line, path, number, len(words) + 1, skips)
            if word is not None:
                if check is not None:
                    check(word, path)
                words.append(word)
            elif first_token is None:
                first_token = number, line
    if block_start is not None:
        n_sentences += 1
        yield _checked_block(words, path, block_start, first_token)
    if not n_sentences:
        fix = EMPTY_FILE_FIX.replace("data.source.paths", config_key)
        raise DataFormatError(path, None, "no sentences: the file is empty or holds no word lines", fix)


def _checked_block(words: list[ConlluWord], path: Path, block_start: int,
                   first_token: tuple[int, str] | None) -> list[ConlluWord]:
    """The block's words; a block without any is refused, naming what it holds instead (`first_token`: the number
    and text of its first multiword-token or empty-node line, None when it holds comments only)."""
    if words:
        return words
    if first_token is None:
        problem = "a sentence block without word lines (comments only) ends before this blank line"
        raise DataFormatError(path, block_start, problem, FORMAT_FIX)
    number, line = first_token
    token_id, form = line.split("\t")[ID:FORM + 1]
    if "-" in token_id:
        problem = (f"a sentence block without word lines: its multiword token {token_id} {form!r} is followed by "
                   "none of the words it spans")
        fix = ("after a multiword-token line give one word line per word it spans (e.g. 1-2 don't, then 1 do and "
               "2 n't), or remove the block")
    else:
        problem = f"a sentence block without word lines: its empty node {token_id} {form!r} is no word"
        fix = "give the sentence its word lines (IDs 1, 2, ...), or remove the block"
    raise DataFormatError(path, number, problem, fix)


def _require_xpos(word: ConlluWord, path: Path) -> None:
    if word.xpos in ("", "_"):
        raise DataFormatError(path, word.line, f"no XPOS tag (column 5 is {word.xpos!r}) for {word.form!r}", XPOS_FIX)


def _xpos_sentence(words: list[ConlluWord], path: Path, skips: SkipCounter) -> TaggedSentence | None:
    unknown = [word for word in words if word.xpos not in XPOS_TAGS]
    if unknown:  # counted under its first unknown tag, at that word's line
        skips.skip(skip_unknown_tag(unknown[0].xpos), f"{path}:{unknown[0].line}")
        return None
    return TaggedSentence(tuple(word.form for word in words), tuple(word.xpos for word in words),
                          f"{path}:{words[0].line}")


def parse_word_line(
    line: str, path: Path, number: int, expected_id: int, skips: SkipCounter
) -> ConlluWord | None:
    """The 10 columns of a word line, as written; None for a multiword-token line or an empty node (counted in
    `skips`). The column count, the word ID (`expected_id`) and a non-empty FORM are checked, nothing else."""
    columns = line.split("\t")
    if len(columns) != N_COLUMNS:
        raise DataFormatError(path, number, f"expected {N_COLUMNS} tab-separated columns, got {len(columns)}",
                              FORMAT_FIX)
    token_id = columns[ID]
    for separator, reason in (("-", SKIP_MULTIWORD), (".", SKIP_EMPTY_NODE)):
        parts = token_id.split(separator)
        if len(parts) == 2 and all(part.isdigit() for part in parts):
            skips.skip(reason, f"{path}:{number}")
            return None
    if token_id != str(expected_id):
        raise DataFormatError(path, number, f"word ID {token_id!r} where {expected_id} comes next", FORMAT_FIX)
    if not columns[FORM]:
        raise DataFormatError(path, number, "empty FORM (column 2)", FORMAT_FIX)
    return ConlluWord(number, *columns)


def sentence_heads(words: Sequence[ConlluWord], path: Path, single_root: bool = False) -> list[int]:
    """Each word's HEAD as an int (ROOT, or the 1-based ID of its head word), checked to form a tree: every word's
    chain of heads reaches ROOT without a cycle. A HEAD that is not an integer in 0..len(words) is refused at its
    word's line, a cycle at the line of its first word found; with `single_root`, a sentence without exactly one
    word headed by ROOT at the line of its first word. O(n): each word is walked once."""
    heads = [_head(word, len(words), path) for word in words]
    if single_root and heads.count(ROOT) != 1:
        raise _root_count_error(words, heads, path)
    reaches_root = [True] + [False] * len(words)  # by word ID; ROOT reaches itself
    for start in range(1, len(words) + 1):
        walk, on_walk, word = [], set(), start
        while not reaches_root[word]:
            if word in on_walk:
                raise _cycle_error(words, walk[walk.index(word):], path)
            walk.append(word)
            on_walk.add(word)
            word = heads[word - 1]
        for word in walk:
            reaches_root[word] = True
    return heads


def _head(word: ConlluWord, n_words: int, path: Path) -> int:
    """HEAD as an int in 0..n_words; anything else is a DataFormatError at the word's line."""
    if not (word.head.isascii() and word.head.isdigit()):
        raise DataFormatError(path, word.line, f"HEAD {word.head!r} of {word.form!r} is not an integer", HEAD_FIX)
    head = int(word.head)
    if head > n_words:
        problem = f"HEAD {head} of {word.form!r} is outside the sentence's {n_words} words"
        raise DataFormatError(path, word.line, problem, HEAD_FIX)
    if head == int(word.id):
        problem = f"HEAD {head} of {word.form!r} is its own ID: a word cannot head itself"
        raise DataFormatError(path, word.line, problem, TREE_FIX)
    return head


def _root_count_error(words: Sequence[ConlluWord], heads: list[int], path: Path) -> DataFormatError:
    """The error of a sentence with no word, or several words, headed by ROOT: at its first word's line."""
    roots = [f"{word.id} {word.form!r}" for word, head in zip(words, heads) if head == ROOT]
    problem = (f"{len(roots)} words headed by 0 in this sentence ({', '.join(roots)})" if roots
               else "no word headed by 0 in this sentence (no root)")
    return DataFormatError(path, words[0].line, problem, ONE_ROOT_FIX)


def _cycle_error(words: Sequence[ConlluWord], cycle: list[int], path: Path) -> DataFormatError:
    """The error of heads that go round `cycle` (word IDs, in head order) without reaching the root."""
    names = [f"{word_id} {words[word_id - 1].form!r}" for word_id in [*cycle, cycle[0]]]
    problem = f"the HEADs of {' -> '.join(names)} form a cycle: these words never reach the root 0"
    return DataFormatError(path, words[cycle[0] - 1].line, problem, TREE_FIX)
