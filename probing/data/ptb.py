"""Penn Treebank .mrg files ("combined": parse trees with POS tags) as POS-tagged sentences.

See docs/data.md, 'Penn Treebank .mrg files'.
"""

from __future__ import annotations

import itertools
import re
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from probing.data.records import SkipCounter
from probing.data.task_records import TaggedSentence
from probing.data.text import archive_of, files_in, read_lines
from probing.errors import DataFormatError

EMPTY_ELEMENT = "-NONE-"
SUFFIX = ".mrg"
SKIP_ONLY_EMPTY_ELEMENTS = "tree with only empty elements (-NONE-), no words"
FORMAT_FIX = "give Penn Treebank 'combined' .mrg trees: balanced brackets, each word as (TAG word)"
EMPTY_FILE_FIX = "give a .mrg file with at least one tree, or leave it out of data.source.paths"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


@dataclass
class _Node:
    """A bracketed node: its label ("" for the unlabelled root of `( (S ...) )`), children and opening line."""

    line: int
    label: str = ""
    children: list[_Node | str] = field(default_factory=list)


def ptb_files(paths: Sequence[Path], config_key: str = "data.source.paths") -> list[Path]:
    """The .mrg files to read: files as given, a folder's *.mrg files and a zip's *.mrg members, each sorted by name."""
    files: list[Path] = []
    for path in paths:
        if path.suffix == ".zip" and path.is_file():
            names = _zip_members(path)
            if not names:
                raise DataFormatError(path, None, f"no {SUFFIX} files in the archive", EMPTY_FILE_FIX)
            files.extend(path / name for name in names)
        else:
            files.extend(files_in([path], f"*{SUFFIX}", config_key))
    return files


def _zip_members(path: Path) -> list[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            return sorted(name for name in archive.namelist() if name.endswith(SUFFIX))
    except zipfile.BadZipFile as error:
        raise DataFormatError(path, None, f"not a readable zip archive ({error})", "give an intact .zip") from None


def read_ptb(paths: Iterable[Path], skips: SkipCounter, config_key: str = "data.source.paths") -> list[TaggedSentence]:
    """The POS-tagged sentences of the .mrg files (or zip members, see `ptb_files`), in order.

    Each sentence's source is "file:line" of its tree's opening bracket. A tree with only empty elements is
    counted in `skips`; a file without any tree is a DataFormatError."""
    sentences: list[TaggedSentence] = []
    for path, lines in _numbered_lines(paths, config_key):
        n_trees = 0
        for line, tree in parse_trees(lines, path):
            n_trees += 1
            words = list(_tagged_words(tree))
            if words:
                tokens, tags = zip(*words)
                sentences.append(TaggedSentence(tokens, tags, f"{path}:{line}"))
            else:
                skips.skip(SKIP_ONLY_EMPTY_ELEMENTS, f"{path}:{line}")
        if not n_trees:
            raise DataFormatError(path, None, "no trees: the file is empty or blank", EMPTY_FILE_FIX)
    return sentences


def parse_trees(lines: Iterable[tuple[int, str]], path: str | Path) -> Iterator[tuple[int, _Node]]:
    """(line of the opening bracket, tree) for each top-level bracketed tree of the numbered `lines`."""
    stack: list[_Node] = []
    for number, line in lines:
        for token in _TOKEN.findall(line):
            if token == "(":
                stack.append(_Node(number))
            elif token == ")":
                tree = _close(stack, path, number)
                if tree is not None:
                    yield tree.line, tree
            elif not stack:
                raise DataFormatError(path, number, f"{token!r} outside any bracket", FORMAT_FIX)
            elif not stack[-1].label and not stack[-1].children:
                stack[-1].label = token
            else:
                stack[-1].children.append(token)
    if stack:
        raise DataFormatError(path, stack[0].line, "the bracket opened on this line is never closed", FORMAT_FIX)


def _close(stack: list[_Node], path: str | Path, number: int) -> _Node | None:
    """Pop the innermost open node into its parent; the node itself when it was a whole tree, else None."""
    if not stack:
        raise DataFormatError(path, number, "')' closes no open bracket", FORMAT_FIX)
    node = stack.pop()
    _check_node(node, path)
    if not stack:
        return node
    stack[-1].children.append(node)
    return None


def _check_node(node: _Node, path: str | Path) -> None:
    """A node is a pre-terminal `(TAG word)` or holds only nodes; anything else cannot be read as tagged words."""
    words = [child for child in node.children if isinstance(child, str)]
    if not node.label and not node.children:
        raise DataFormatError(path, node.line, "empty brackets '()'", FORMAT_FIX)
    if not node.children:
        raise DataFormatError(path, node.line, f"({node.label}) has no word or subtree", FORMAT_FIX)
    if words and (len(node.children) > 1 or not node.label):
        label = node.label or "an unlabelled node"
        problem = f"{label} holds the word {words[0]!r} beside other children; a word must be alone under its tag"
        raise DataFormatError(path, node.line, problem, FORMAT_FIX)


def _tagged_words(node: _Node) -> Iterator[tuple[str, str]]:
    """(word, tag) for each pre-terminal under `node`, left to right, leaving out -NONE- elements."""
    first = node.children[0]
    if isinstance(first, str):
        if node.label != EMPTY_ELEMENT:
            yield first, node.label
        return
    for child in node.children:
        yield from _tagged_words(child)


def _numbered_lines(paths: Iterable[Path], config_key: str) -> Iterator[tuple[Path, Iterator[tuple[int, str]]]]:
    """(path, its numbered lines) for files on disk and zip members (`ARCHIVE.zip/MEMBER`), decoded strictly as
    UTF-8; consecutive members of one archive are read with the archive opened once."""
    for archive, group in itertools.groupby(paths, key=archive_of):
        if archive is None:
            for path in group:
                yield path, read_lines(path, config_key)
            continue
        with zipfile.ZipFile(archive) as opened:
            for path in group:
                yield path, _decoded_lines(opened.read(path.relative_to(archive).as_posix()), path)


def _decoded_lines(data: bytes, path: Path) -> Iterator[tuple[int, str]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        problem = f"byte 0x{data[error.start]:02x} is not valid UTF-8"
        raise DataFormatError(path, line, problem, "re-encode the file as UTF-8") from None
    return enumerate(text.splitlines(), start=1)
