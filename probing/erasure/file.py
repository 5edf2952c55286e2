"""A fitted eraser's file: the edit's tensors and its description (method, dropped dimensions, fit, what it was
fitted on) in a hashed safetensors file (probing.features.tensor_files), and the checks that refuse a file that
is not one, was changed since, or does not fit its description."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probing.erasure.eraser import is_integer
from probing.erasure.fitted import ERASER_TENSORS, FittedEraser
from probing.errors import DataFormatError
from probing.features.tensor_files import (
    READ_ERRORS,
    hash_matches,
    hashed_metadata,
    read_tensor_file,
    write_tensor_file,
)
from probing.vocabulary import ERASURE_METHODS

ERASER_FILE = "eraser.safetensors"  # the fitted eraser that probe.py saves in its run folder
ERASER_FILE_FORMAT = 1
ERASER_KEY = "eraser"  # the safetensors metadata key of an eraser file's description
ERASER_RECORD = {"method": str, "dropped_dims": list, "fit": dict, "about": dict}  # the description's keys, types
REFIT_FIX = "refit the eraser (rerun the run that saved it)"


def save_eraser(fitted: FittedEraser, path: Path, about: Mapping[str, Any]) -> None:
    """Write `fitted` and `about` (what it was fitted on: model, layer, concept...) to a checked safetensors file
    (probing.features.tensor_files), atomically."""
    tensors = {name: getattr(fitted, name).detach().cpu().double().contiguous() for name in ERASER_TENSORS}
    text = json.dumps({"format": ERASER_FILE_FORMAT, "method": fitted.method, "dropped_dims": list(fitted.dropped_dims),
                       "fit": fitted.about, "about": dict(about)})
    write_tensor_file(path, tensors, hashed_metadata(ERASER_KEY, text, tensors))


def load_eraser(path: Path) -> tuple[FittedEraser, dict[str, Any]]:
    """The eraser of a file that `save_eraser` wrote, and the `about` saved with it; a file that is not one, whose
    tensors or metadata changed since, or whose tensors do not fit its description (as saved probes are checked) is
    one DataFormatError."""
    try:
        metadata, tensors = read_tensor_file(path)
        record = json.loads(metadata[ERASER_KEY]) if ERASER_KEY in metadata else None
    except (*READ_ERRORS, ValueError) as error:
        raise DataFormatError(path, None, f"not a readable eraser file ({type(error).__name__}: {error})",
                              REFIT_FIX) from error
    if record is None:
        raise DataFormatError(path, None, f"no `{ERASER_KEY}` description in its metadata: a safetensors file of "
                              "another kind, not a saved eraser", f"point to an eraser file, or {REFIT_FIX}")
    if not isinstance(record, dict) or record.get("format") != ERASER_FILE_FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise DataFormatError(path, None, f"eraser file format {found}, this version reads {ERASER_FILE_FORMAT}",
                              REFIT_FIX)
    if not hash_matches(metadata, tensors, ERASER_KEY):
        raise DataFormatError(path, None, "its metadata or tensors do not match the hash recorded when the file was "
                              "written (the file is damaged or was changed)", REFIT_FIX)
    problem = record_problem(record) or tensors_problem(record, tensors)
    if problem is not None:
        raise DataFormatError(path, None, problem, REFIT_FIX)
    fitted = FittedEraser(record["method"], *(tensors[name] for name in ERASER_TENSORS),
                          tuple(record["dropped_dims"]), record["fit"])
    return fitted, record["about"]


def record_problem(record: Mapping[str, Any]) -> str | None:
    """What is wrong with an eraser file's description (its method, dropped dimensions, fit and `about`), if
    anything: a valid hash says only that the file is as written, not that this version wrote it so."""
    wrong = [key for key, kind in ERASER_RECORD.items() if not isinstance(record.get(key), kind)]
    if wrong:
        return f"its `{ERASER_KEY}` description lacks {', '.join(wrong)} (or holds another kind of value there)"
    if record["method"] not in ERASURE_METHODS:
        return f"method {record['method']!r} is not an eraser's (one of {', '.join(ERASURE_METHODS)})"
    fit = record["fit"]
    sizes = [key for key in ("feature_dim", "removed_rank") if not is_integer(fit.get(key)) or fit[key] < 0]
    if sizes:
        return f"its fit records no {' or '.join(sizes)} (a count of 0 or more)"
    dropped, dim = record["dropped_dims"], fit["feature_dim"]
    if not all(is_integer(index) and 0 <= index < dim for index in dropped):
        return f"dropped_dims {dropped} are not dimensions of its {dim}-dimensional features"
    return None


def tensors_problem(record: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> str | None:
    """What is wrong with an eraser file's tensors, if anything: other names than every method's
    (ERASER_TENSORS), shapes that do not fit the features and removed rank of its fit, values that are not finite."""
    method, dim, rank = record["method"], record["fit"]["feature_dim"], record["fit"]["removed_rank"]
    if sorted(tensors) != sorted(ERASER_TENSORS):
        return (f"it holds the tensors {', '.join(sorted(tensors)) or 'none'}, where a fitted eraser ({method}) holds "
                f"{', '.join(ERASER_TENSORS)}")
    left = tensors["proj_left"]
    width = left.shape[1] if left.ndim == 2 else -1
    expected = {"mean": (dim,), "proj_left": (dim, width), "proj_right": (width, dim)}
    if width < rank or any(tuple(tensors[name].shape) != shape for name, shape in expected.items()):
        shapes = ", ".join(f"{name} {tuple(tensors[name].shape)}" for name in ERASER_TENSORS)
        return (f"its tensors ({shapes}) do not fit its {dim}-dimensional features and removed rank {rank} "
                f"(mean ({dim},), proj_left ({dim}, r), proj_right (r, {dim}) with r >= {rank})")
    broken = [name for name in ERASER_TENSORS if not torch.isfinite(tensors[name]).all()]
    if broken:
        return f"tensors {', '.join(broken)} hold values that are not finite"
    return None
