"""User-facing errors. Entry points print these without a traceback (see `probing.cli`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


class ProbingError(Exception):
    """An error the user can fix; its message says what went wrong and what to do."""


class DataFormatError(ProbingError):
    """A data file cannot be read: names the file, the line and the fix."""

    def __init__(self, path: str | Path, line: int | None, problem: str, fix: str):
        self.path, self.line, self.problem, self.fix = str(path), line, problem, fix
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}. Fix: {fix}")


class ModelLoadError(ProbingError):
    """An encoder or tokenizer cannot be loaded (unknown name offline, bad local path)."""


class StoreMismatchError(ProbingError):
    """A feature store exists but was built for a different request (model, pooling, data...)."""


class ConfigError(ProbingError):
    """A configuration value is invalid (unknown layer, unsupported option...).

    Library code names the settings it refuses by its own argument names, each written `setting("seed")` in the
    message: the message reads them bare (`seed=0`) where the object was built in Python, and `probing.config.build`
    writes the key path of the config node it built instead (`data.split.seed`)."""

    @property
    def settings(self) -> tuple[str, ...]:
        """The names of the settings the message names, in order (none once the config layer has keyed them)."""
        return tuple(dict.fromkeys(SETTING.findall(self.marked)))

    @property
    def marked(self) -> str:
        """The message with its settings still marked (`str` reads them bare)."""
        return super().__str__()

    def __str__(self) -> str:
        return SETTING.sub(r"\1", self.marked)

    def renamed(self, name: Callable[[str], str], final: bool = False) -> ConfigError:
        """The same error with each setting `n` named `name(n)`: still marked (a caller adding the argument it passed
        the settings under), or `final`, plain text (the config layer writing the user's key path)."""
        text = SETTING.sub(lambda match: name(match.group(1)) if final else setting(name(match.group(1))), self.marked)
        renamed = ConfigError.__new__(type(self))
        ProbingError.__init__(renamed, text)
        renamed.__dict__.update(self.__dict__)
        return renamed


# A setting's name inside a ConfigError's message, between two marks that no message text uses.
SETTING = re.compile("\x1e([\\w.]+)\x1f")


def setting(name: str) -> str:
    """The setting `name` (an argument name, or a dotted path of them: `split.seed`) marked in a ConfigError's message:
    read bare, or as the key path of the config node where `probing.config.build` built the object."""
    return f"\x1e{name}\x1f"


@contextmanager
def settings_under(argument: str) -> Iterator[None]:
    """A ConfigError raised inside names its settings as parts of `argument` (`seed` -> `split.seed`): an object that
    builds another from one of its arguments (a source's `split` is a SplitConfig)."""
    try:
        yield
    except ConfigError as error:
        raise error.renamed(lambda name: f"{argument}.{name}") from None


@contextmanager
def settings_as(names: Mapping[str, str]) -> Iterator[None]:
    """A ConfigError raised inside names each setting `n` of `names` as `names[n]`: a caller that passes its own
    settings as another function's arguments (the amnesic analysis's `concept_paths` as a concept's `paths`)."""
    try:
        yield
    except ConfigError as error:
        raise error.renamed(lambda name: names.get(name, name)) from None


class StoreCorruptError(ProbingError):
    """A feature store's contents are damaged: a checksum does not match, or a value is NaN or inf."""


class CheckpointError(ProbingError):
    """A training checkpoint is damaged or cannot be verified: names the file and how to resume or start over."""


@contextmanager
def settings_named(names: Mapping[str, str]) -> Iterator[None]:
    """A ProbingError raised inside names each setting `old` of `names` as its `new` name: a data source reads the
    same files in analyze.py under another key (`data.data_dir` there is `analysis.sentences.data_dir`), and its
    messages name the keys of probe.py and train.py."""
    try:
        yield
    except ProbingError as error:
        def renamed(text: str) -> str:
            for old, new in names.items():
                text = text.replace(old, new)
            return text

        if isinstance(error, DataFormatError):
            raise DataFormatError(error.path, error.line, renamed(error.problem), renamed(error.fix)) from None
        # a ConfigError keeps its marked settings, for the config layer to key
        raise type(error)(renamed(error.marked if isinstance(error, ConfigError) else str(error))) from None
