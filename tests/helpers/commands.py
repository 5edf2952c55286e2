"""The entry-script command lines that the README and docs/ show, parsed into (script, overrides) as a user would type
them, with the placeholders (`/path/to/...`, `<time>`, `<pos run>`) replaced by paths under a folder of the test."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

from tests.helpers import REPO

ENTRY_SCRIPTS = ("probe.py", "train.py", "extract.py", "analyze.py")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`((?:\.venv/bin/)?python [^`]+)`")
PLACEHOLDER = re.compile(r"<([^<>]+)>")
SEPARATORS = (";", "&&", "||", "|", "&")
LOOP = re.compile(r"for (\w+) in ([^;]+);")
# The settings whose value must name a folder exported by train.py (<run>/model/task.json) for the config to resolve.
FINETUNED_KEYS = ("finetuned", "compare_to", "model.name_or_path")


@dataclass(frozen=True)
class Command:
    source: str            # "README.md:123"
    script: str            # probe.py | train.py | extract.py | analyze.py
    overrides: tuple[str, ...]
    multirun: bool

    def __str__(self) -> str:
        return f"{self.source}: python {self.script} {' '.join(self.overrides)}"


def documented_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def documented_commands(pages: list[Path] | None = None) -> list[Command]:
    """Every entry-script command in the fenced code blocks and inline code of the pages."""
    commands = []
    for page in pages or documented_pages():
        text = page.read_text(encoding="utf-8")
        snippets = [(match.start(1), block) for match in FENCE.finditer(text) for block in [match.group(1)]]
        snippets += [(match.start(1), match.group(1)) for match in INLINE.finditer(text)]
        for start, snippet in snippets:
            line = text.count("\n", 0, start) + 1
            for offset, shell_line in enumerate(joined_lines(snippet)):
                commands += commands_of(shell_line, f"{page.relative_to(REPO)}:{line + offset}")
    return commands


def joined_lines(snippet: str) -> list[str]:
    """The snippet's lines with backslash continuations joined (a continued line keeps the first line's number)."""
    joined, pending = [], ""
    for line in snippet.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    return joined + ([pending] if pending else [])


def commands_of(shell_line: str, source: str) -> list[Command]:
    """The entry-script commands of one shell line (several where `;` or `&&` chain them); a placeholder such
    as `<pos run>` becomes a name (`pos_run`), and shell loop variables take their first value."""
    shell_line = PLACEHOLDER.sub(lambda match: re.sub(r"\W+", "_", match.group(1)), shell_line)
    first_values = {name: values.split()[0] for name, values in LOOP.findall(shell_line)}
    for name, value in first_values.items():
        shell_line = shell_line.replace(f"${name}", value)
    try:
        words = shlex.split(shell_line, comments=True)
    except ValueError:
        return []
    found = []
    for index, word in enumerate(words):
        if word.removeprefix("./") in ENTRY_SCRIPTS and index > 0 and Path(words[index - 1]).name == "python":
            arguments = arguments_until_separator(words[index + 1:])
            found.append(Command(source, word.removeprefix("./"), tuple(a for a in arguments if a not in ("...", "-m")),
                                 multirun="-m" in arguments or "--multirun" in arguments))
    return found


def arguments_until_separator(words: list[str]) -> list[str]:
    """The words up to the end of one command (`;`, `&&`, `|`, or a word ending in `;`)."""
    arguments = []
    for word in words:
        if word in SEPARATORS:
            break
        arguments.append(word.rstrip(";"))
        if word.endswith(";"):
            break
    return [argument for argument in arguments if argument]


def with_placeholders_filled(command: Command, root: Path) -> tuple[str, ...]:
    """The command's overrides with each placeholder path made real under `root`: `/path/to/x`
    becomes `root/path/to/x`, and the folders named by FINETUNED_KEYS
    hold a model exported by train.py (its task.json) so that the resolvers reading them find one."""
    overrides = []
    for override in command.overrides:
        override = override.replace("/path/to/", f"{root}/path/to/")
        key, _, value = override.partition("=")
        if key.lstrip("+") in FINETUNED_KEYS and ("/" in value or "_run" in value):
            for folder in re.split(r"[\[\],]", value):
                if folder:
                    fake_exported_model(root / folder)
        overrides.append(override)
    return tuple(overrides)


def fake_exported_model(folder: Path) -> None:
    """A folder that passes for train.py's export (folder/task.json, or folder/model/task.json for a run folder):
    enough for the config resolvers, which only look for the file."""
    model = folder if folder.name == "model" else folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    task = next((name for name in ("sst2", "mrpc", "ner") if name in str(folder)), "pos")
    (model / "task.json").write_text(json.dumps({"task": task, "kind": "token", "labels": ["X"]}), encoding="utf-8")


def sweep_variants(overrides: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The override lists that cover a sweep: all axes at their first value, then each axis at each of its other
    representative values (see `representative`) with the other axes at their first value."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    axes = {index: representative(list(override.sweep_string_iterator())) for index, override in enumerate(parsed)
            if override.is_sweep_override()}
    keys = {index: parsed[index].get_key_element() for index in axes}
    first = [f"{keys[index]}={axes[index][0]}" if index in axes else override
             for index, override in enumerate(overrides)]
    variants = [tuple(first)]
    for index, values in axes.items():
        for value in values[1:]:
            variants.append(tuple(first[:index] + [f"{keys[index]}={value}"] + first[index + 1:]))
    return variants


def representative(values: list[str]) -> list[str]:
    """The values of a sweep axis worth composing apart: every non-integer value, and the first and last integer
    (layer=0..12 composes layers 0 and 12; a middle integer resolves like its neighbours)."""
    integers = [value for value in values if value.lstrip("-").isdigit()]
    kept = {*integers[:1], *integers[-1:]}
    return [value for value in values if value in kept or value not in integers]
