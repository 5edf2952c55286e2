"""Fine-tuned encoders as train.py leaves them: `<train run>/model/`, a Hugging Face folder with `task.json`.

See docs/finetuning.md, 'Export' under 'What it does'.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probing.data.text import note_data_files, read_sha256sum_listing, sha256_file, sha256sum_listing
from probing.errors import ConfigError, ModelLoadError

log = logging.getLogger(__name__)

TASK_FILE = "task.json"  # written by probing.finetune.export next to the weights
HEAD_FILE = "task_head.safetensors"  # the task head, beside it
MODEL_DIR = "model"      # the export's folder inside a train.py run folder
HASHES_FILE = "export.sha256"  # the SHA-256 of every other file of the export, written last
EXPORT_FIX = ("point model.name_or_path at a <train run>/model folder that train.py wrote whole (or fine-tune again "
              "with train.py, into a new run folder)")


@dataclass(frozen=True)
class FinetunedModel:
    path: Path   # the Hugging Face folder
    task: str    # pos | ner | sst2 | mrpc
    label: str   # unique among the models compared, safe in a folder name: the task, or task-<run folder>


def record_export_hashes(folder: Path) -> None:
    """Write HASHES_FILE into an export whose other files are all written."""
    files = sorted(path for path in folder.iterdir() if path.is_file() and path.name != HASHES_FILE)
    (folder / HASHES_FILE).write_text(sha256sum_listing(files), encoding="utf-8")


def verify_export(folder: Path, names: Sequence[str] | None = None) -> None:
    """Refuse an export whose files `names` (None: every file that its HASHES_FILE lists, as the encoder's loader
    checks them) are not those train.py wrote. Checking every file warns of an export that records no hashes."""
    listing = folder / HASHES_FILE
    if not listing.is_file():
        # Exported before the hashes were recorded (or not an export at all): read unchecked.
        if names is None and (folder / TASK_FILE).is_file():
            log.warning("%s was exported by an older version, which recorded no hashes (%s): changes to its files "
                        "cannot be detected", folder, HASHES_FILE)
        return
    try:
        recorded = read_sha256sum_listing(listing)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{listing} is not readable as the export's hashes ({error}). "
                             f"Fix: {EXPORT_FIX}") from error
    for name in recorded if names is None else names:
        problem = export_file_problem(folder / name, recorded.get(name))
        if problem is not None:
            raise ModelLoadError(f"{folder / name} {problem}. Fix: {EXPORT_FIX}")


def export_file_problem(path: Path, recorded: str | None) -> str | None:
    """What tells a file of an export from the one train.py wrote, whose SHA-256 it recorded, if anything."""
    if recorded is None:
        return f"is not among the files that {HASHES_FILE} lists"
    if not path.is_file():
        return f"is missing ({HASHES_FILE} lists it)"
    if sha256_file(path) != recorded:
        return (f"is not the file that train.py exported: its SHA-256 is not the one {HASHES_FILE} records (the "
                "file is damaged or was changed)")
    return None


def finetuned_task(name_or_path: str | Path | None) -> str | None:
    """The task a model folder was fine-tuned on (its task.json, checked, and recorded with the job's data files: see
    `probing.data.text.note_data_files`), or None for any other model."""
    if name_or_path is None:
        return None
    folder = Path(str(name_or_path)).expanduser()
    task_file = folder / TASK_FILE
    if not task_file.is_file():
        return None
    verify_export(folder, [TASK_FILE])
    note_data_files([task_file])
    try:
        return str(json.loads(task_file.read_text(encoding="utf-8"))["task"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def model_folders(entry: str | Path) -> list[Path]:
    """The exported model folders of one entry: a model folder itself, a train.py run folder (its model/), or a
    folder of runs such as a train.py sweep (each run's model/), sorted."""
    folder = Path(str(entry)).expanduser()
    if (folder / TASK_FILE).is_file():
        return [folder]
    if (folder / MODEL_DIR / TASK_FILE).is_file():
        return [folder / MODEL_DIR]
    return sorted(path.parent for path in folder.glob(f"*/{MODEL_DIR}/{TASK_FILE}")) if folder.is_dir() else []


def find_finetuned_models(entries: Sequence[str | Path] | str | None, key: str = "finetuned") -> list[FinetunedModel]:
    """Every fine-tuned model named by `entries` (see model_folders), labelled by task; refused when an entry holds
    none, so that a typo does not silently leave a model out of a comparison."""
    if entries is None or (not isinstance(entries, str) and len(entries) == 0):
        raise ConfigError(f"{key} names no fine-tuned model. Fix: {key}=[<train run>,...] (train.py run folders, "
                          "their model/ folders, or a train.py sweep folder)")
    entries = [entries] if isinstance(entries, (str, Path)) else list(entries)
    folders = []
    for entry in entries:
        found = model_folders(entry)
        if not found:
            raise ConfigError(f"{key}: {entry} holds no model exported by train.py (<run>/{MODEL_DIR}/{TASK_FILE}). "
                              "Fix: name a train.py run folder, its model/ folder, or a train.py sweep folder whose "
                              "runs have finished")
        folders += [folder.resolve() for folder in found if folder.resolve() not in folders]
    tasks = [finetuned_task(folder) for folder in folders]
    return [FinetunedModel(folder, task, label_of(folder, task, tasks.count(task) > 1))
            for folder, task in zip(folders, tasks)]


def label_of(folder: Path, task: str, shared_task: bool) -> str:
    """`task`, or `task-<run folder>` when several models of the task are compared."""
    run = folder.parent.name if folder.name == MODEL_DIR else folder.name
    label = f"{task}-{run}" if shared_task else task
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", label)


# Zhao et al. 2020 §4.4.2 as one sweep (conf/experiment/zhao2020_fig6.yaml): the pretrained model, then per fine-tuned
# model setup (a), its pretrained probes scored on the fine-tuned features, and setup (b), new probes.
PRETRAINED = "pretrained"
SETUP_SUFFIXES = ("a", "b")


def comparison_setups(entries: Sequence[str | Path] | str | None) -> list[str]:
    """The sweep's setups in the order they must run: "pretrained", then "<label>-a", "<label>-b" per model."""
    return [PRETRAINED] + [f"{model.label}-{suffix}" for model in find_finetuned_models(entries)
                           for suffix in SETUP_SUFFIXES]


def setup_model(setup: str, entries: Sequence[str | Path] | str | None, pretrained: str) -> str:
    """The encoder of a setup: the pretrained model, or the fine-tuned model folder its label names."""
    if setup == PRETRAINED:
        return pretrained
    label, _, suffix = str(setup).rpartition("-")
    models = {model.label: model for model in find_finetuned_models(entries)}
    if suffix not in SETUP_SUFFIXES or label not in models:
        known = ", ".join(comparison_setups(entries))
        raise ConfigError(f"comparison_setup={setup} is not a setup of this comparison. Fix: one of {known}")
    return str(models[label].path)


def setup_reuse(setup: str, sweep_dir: str | Path) -> str | None:
    """Setup (a) scores the probes of the sweep's pretrained runs (its `pretrained/` folder); others train."""
    return str(Path(str(sweep_dir)) / PRETRAINED) if str(setup).endswith("-a") else None
