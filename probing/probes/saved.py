"""Trained probes on disk: `probes.safetensors` in every probe run folder, and their reuse on other features.

See docs/probing.md, 'Probing fine-tuned encoders', saved probes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from probing.errors import ConfigError, ProbingError
from probing.features.finetuned import finetuned_task
from probing.features.identity import FeatureIdentity, settings_differences
from probing.features.tensor_files import (
    HASH_KEY,
    READ_ERRORS,
    hash_matches,
    hashed_metadata,
    read_tensor_file,
    tensors_hash,
    write_tensor_file,
)
from probing.probes.components import families
from probing.probes.controls import ControlPart

log = logging.getLogger(__name__)

PROBES_FILE = "probes.safetensors"
# 4: the control task's head is named as the module's part holds it (parts.control.probes.*); 3: the recorded hash
# covers the metadata and the tensors (HASH_KEY); 2: it covers the tensors only (TENSORS_HASH_KEY), or is missing.
# 2 to 4 store each head's w1 (C, H, D) and w2 (C, 2, H), probe k's nn.Linear weights; format 1 stored them
# transposed, (C, D, H) and (C, H, 2), and is converted when read. Formats 1 to 3 named the control head
# control_probes.*: renamed when read (`RENAMED`).
FORMAT = 4
FORMATS = (1, 2, 3, FORMAT)
HASHED_FORMATS = (3, FORMAT)  # the formats whose files record HASH_KEY
TRANSPOSED_IN_FORMAT_1 = ("mlps.w1", "mlps.w2")
HEADS = ("probes.", f"{ControlPart.HEAD}.")  # the saved heads: the names of their tensors start so
# The names of older versions' tensors (and Lightning checkpoints' weights): the start of a name -> today's.
RENAMED = {"control_probes.": f"{ControlPart.HEAD}."}
# What must agree between the saved probes and the features they score (the model may differ: that is the point).
MUST_MATCH = ("level", "classes", "feature_dim", *FeatureIdentity.beyond_the_model(), "num_layers")
METADATA_KEY = "probing"  # format 3 records the hash of this string and the tensors under HASH_KEY
TENSORS_HASH_KEY = "tensors_xxh3_128"  # format 2: of the tensors only
# What scoring saved probes reads from `about` besides MUST_MATCH (a file without them is not a probes file).
REQUIRED = ("format", "module", "model_name_or_path", "weights_sha256", "best_dev_micro_f1")
RERUN_FIX = "Fix: rerun the probe run that wrote it (it writes a new probes file)"
CHANGED = "(the file is damaged or was changed)"


@dataclass
class SavedProbes:
    path: Path
    about: dict[str, Any]
    state_dict: dict[str, torch.Tensor]

    @property
    def has_control(self) -> bool:
        return any(name.startswith(f"{ControlPart.HEAD}.") for name in self.state_dict)


def saved_head(name: str) -> str | None:
    """The saved head (of HEADS) that the tensor `name` belongs to; None for the module's other tensors."""
    return next((head for head in HEADS if name.startswith(head)), None)


def current_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with the tensor names of older versions (`RENAMED`) renamed to today's."""
    def current(name: str) -> str:
        old = next((old for old in RENAMED if name.startswith(old)), None)
        return name if old is None else RENAMED[old] + name[len(old):]

    return {current(name): tensor for name, tensor in state.items()}


def storage_dtype(precision: str) -> torch.dtype:
    """The dtype probes are stored in after training at `trainer.precision`: bfloat16 for the bf16 precisions,
    float16 for the 16-bit ones, float32 otherwise. Rounding the best-dev weights of a MiniLM probe run to bfloat16
    changes no score (the quickstart's layers 3 and 6, reused: dev and test micro-F1 of both heads identical to 7
    digits) and halves the file (82 to 41 MB)."""
    precision = str(precision)
    if precision.startswith("bf16"):
        return torch.bfloat16
    return torch.float16 if precision.startswith("16") else torch.float32


def save_probes(module: torch.nn.Module, path: Path, about: Mapping[str, Any],
                dtype: torch.dtype = torch.float32) -> Path:
    """Write both heads' weights (floating-point tensors in `dtype`), `about` and the hash of both to `path`
    atomically (a half-written file is never left behind). Loading casts them back to the module's dtype."""
    tensors = {name: tensor.detach().cpu().to(dtype if tensor.is_floating_point() else tensor.dtype).contiguous()
               for name, tensor in module.state_dict().items() if saved_head(name)}
    about = {**about, "storage_dtype": str(dtype).removeprefix("torch.")}
    return write_tensor_file(path, tensors, file_metadata(about, tensors))


def file_metadata(about: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """The safetensors metadata of a probes file of this format: `about` as JSON and the hash of it and `tensors`."""
    return hashed_metadata(METADATA_KEY, json.dumps({**about, "format": FORMAT}), tensors)


def load_probes(path: Path) -> SavedProbes:
    """The probes of one file; a damaged or foreign file is one ProbingError."""
    try:
        metadata, state = read_tensor_file(path)
        about = json.loads(metadata[METADATA_KEY])
    except (*READ_ERRORS, KeyError, ValueError) as error:
        raise ProbingError(f"{path} is not a readable probes file ({type(error).__name__}: {error}). "
                           f"{RERUN_FIX}") from error
    check_about(about, path)
    check_contents(metadata, state, about["format"], path)
    if about["format"] == 1:
        state = {name: tensor.transpose(-1, -2).contiguous() if name.endswith(TRANSPOSED_IN_FORMAT_1) else tensor
                 for name, tensor in state.items()}
    return SavedProbes(Path(path), about, current_names(state))


def check_about(about: Any, path: Path) -> None:
    """Refuse metadata that do not describe probes: not an object, another format, a required key missing."""
    if not isinstance(about, dict):
        raise ProbingError(f"{path}: its `{METADATA_KEY}` metadata are {type(about).__name__} {about!r}, not the "
                           f"description of probes. {RERUN_FIX}")
    if about.get("format") not in FORMATS:
        raise ProbingError(f"{path} has probes file format {about.get('format')}, this version reads "
                           f"{', '.join(map(str, FORMATS))}. {RERUN_FIX}")
    missing = [key for key in REQUIRED if key not in about]
    if missing or not isinstance(about["module"], dict):
        raise ProbingError(f"{path}: its `{METADATA_KEY}` metadata lack {', '.join(missing) or 'module settings'}. "
                           f"{RERUN_FIX}")


def check_contents(metadata: Mapping[str, str], state: Mapping[str, torch.Tensor], file_format: int,
                   path: Path) -> None:
    """Refuse a file whose metadata or tensors do not match the hash recorded with them. A file that records the hash
    of this format is checked whatever format its metadata claim (an edit of the format is a change too); older
    files are read with a warning (see `check_older_file`)."""
    if HASH_KEY not in metadata and file_format not in HASHED_FORMATS:
        check_older_file(state, metadata.get(TENSORS_HASH_KEY), file_format, path)
    elif HASH_KEY not in metadata:
        raise ProbingError(f"{path}: its metadata say probes file format {file_format}, but the hash that format "
                           f"records is missing {CHANGED}. {RERUN_FIX}")
    elif not hash_matches(metadata, state, METADATA_KEY):
        raise ProbingError(f"{path}: its metadata or tensors do not match the hash recorded when the file was written "
                           f"{CHANGED}. {RERUN_FIX}")


def check_older_file(state: Mapping[str, torch.Tensor], recorded: str | None, file_format: int, path: Path) -> None:
    """A file of format 1 or 2, whose metadata (what the probes were trained on, what must match this run) no hash
    covers: warn. Refuse tensors that do not match the tensors' hash it records; without one, values that are not
    finite."""
    uncovered = "its metadata (the layer, classes and other settings the probes were trained on)" + (
        "" if recorded is not None else " and its tensors")
    log.warning("%s was written by an older version (probes file format %s): %s are not covered by a hash, so changes "
                "to them cannot be detected; rerun its probe run to write a checked file", path, file_format, uncovered)
    if recorded is None:
        broken = sorted(name for name, tensor in state.items()
                        if tensor.is_floating_point() and not torch.isfinite(tensor).all())
        if broken:
            raise ProbingError(f"{path}: tensors {', '.join(broken)} hold values that are not finite. {RERUN_FIX}")
    elif tensors_hash(state) != recorded:
        raise ProbingError(f"{path}: the tensor data do not match the hash recorded when the file was written "
                           f"{CHANGED}. {RERUN_FIX}")


def load_into(module: torch.nn.Module, saved: SavedProbes) -> None:
    """Load the saved weights of the heads that `module` has into it; names and shapes must be those it expects
    (otherwise one ProbingError naming the file, rather than torch's report)."""
    expected = {name: tensor.shape for name, tensor in module.state_dict().items() if saved_head(name)}
    heads = {saved_head(name) for name in expected}
    given = {name: tensor for name, tensor in saved.state_dict.items() if saved_head(name) in heads}
    wrong = [f"{name} {shape_of(given.get(name))} (expected {tuple(shape)})" for name, shape in expected.items()
             if name not in given or given[name].shape != shape]
    wrong += [f"{name} (not a weight of these probes)" for name in given if name not in expected]
    if wrong:
        raise ProbingError(f"{saved.path}: its weights do not fit the probes its metadata describe: "
                           f"{'; '.join(wrong)}. {RERUN_FIX}")
    module.load_state_dict(given, strict=False)


def shape_of(tensor: torch.Tensor | None) -> str:
    return "missing" if tensor is None else str(tuple(tensor.shape))


def differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The settings of MUST_MATCH where saved probes and the current run disagree (`settings_differences`)."""
    return settings_differences(saved, current, MUST_MATCH)


def probe_files(folder: str | Path, key: str = "probe.reuse") -> list[Path]:
    """The probes file of a run folder, or every one below a folder of runs; none is a ConfigError."""
    root = Path(str(folder)).expanduser()
    files = [root / PROBES_FILE] if (root / PROBES_FILE).is_file() else sorted(root.rglob(PROBES_FILE))
    if not files:
        raise ConfigError(f"{key}={folder}: no saved probes ({PROBES_FILE}) there. Fix: point it to the folder of "
                          "a finished probe run (or a sweep of them)")
    return files


def find_reusable(folder: str | Path, current: Mapping[str, Any], seed: int | None = None,
                  key: str = "probe.reuse", candidates: list[SavedProbes] | None = None) -> SavedProbes:
    """The saved probes below `folder` (a probe run folder, or a folder of runs such as a sweep; `candidates`: those
    already loaded from it) that fit the current features (MUST_MATCH); among several, those of `seed`. Refused with
    the differences when none fits."""
    candidates = candidates or [load_probes(path) for path in probe_files(folder, key)]
    fitting = [saved for saved in candidates if not differences(saved.about, current)]
    if not fitting:
        closest = min(candidates, key=lambda saved: len(differences(saved.about, current)))
        raise ConfigError(f"{key}={folder}: none of its {len(candidates)} saved probe set(s) was trained on features "
                          f"like this run's; the closest ({closest.path}) differs in "
                          f"{'; '.join(differences(closest.about, current))}. Fix: point it to the probes of the "
                          "same layer, pooling, context size and classes, or change this run's settings to theirs")
    same_seed = [saved for saved in fitting if saved.about.get("seed") == seed]
    chosen = same_seed or fitting
    if len(chosen) > 1:
        shown = ", ".join(str(saved.path) for saved in chosen[:3])
        raise ConfigError(f"{key}={folder}: {len(chosen)} saved probe sets fit this run ({shown}, ...). Fix: point "
                          "it to one run folder")
    return chosen[0]


def module_of(saved: SavedProbes, build_module: Callable[..., torch.nn.Module], control: bool) -> torch.nn.Module:
    """The probe module that `saved` describes (its `about["module"]` settings, with or without the control head),
    holding its weights."""
    try:
        module = build_module(**{**module_settings(saved.about), "control": control})
    except (TypeError, ValueError, ConfigError) as error:
        raise ProbingError(f"{saved.path}: its module settings ({saved.about['module']}) do not build probes "
                           f"({error}). {RERUN_FIX}") from error
    load_into(module, saved)
    return module


def module_settings(about: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword contract of the probe module that saved probes describe (`about["module"]`: the family's record
    beside the contract, built into its `family`). Files written before every probe module took one contract name the
    s-class probes' classes `class_names` and record no family (they were MLP-1s), their level beside the settings
    only, and the MDL block ends (never saved weights) among them."""
    settings = dict(about["module"])
    if "class_names" in settings:
        settings = {"labels": settings.pop("class_names"), "family": "mlp1", **settings}
    settings.pop("mdl_block_ends", None)
    settings.setdefault("level", about.get("level", "context"))
    family = families.pop_family(settings, hidden_dim=1024)
    return {**settings, "family": family}


def reused_summary(saved: SavedProbes) -> dict[str, Any]:
    """Where the scored probes came from, for the results of the run that reuses them."""
    about = saved.about
    return {"path": str(saved.path), "model_name_or_path": about["model_name_or_path"],
            "weights_sha256": about["weights_sha256"], "finetuned_task": finetuned_task(about["model_name_or_path"]),
            "best_epoch": about.get("best_epoch"), "seed": about.get("seed"),
            "dev_micro_f1": about["best_dev_micro_f1"]}
