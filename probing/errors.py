"""User-facing errors. Entry points print these without a traceback (see `probing.cli`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
    """A configuration value is invalid (unknown layer, unsupported option...)."""


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
        raise type(error)(renamed(str(error))) from None
