"""The best fine-tuned model as a Hugging Face folder: the hand-off to probing and geometry (DESIGN.md).

See docs/finetuning.md, 'Export' under 'What it does'.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from safetensors.torch import save_file

from probing.data.files import give_default_permissions
from probing.features.finetuned import HEAD_FILE, TASK_FILE, record_export_hashes
from probing.finetune.module import FineTuner


def export_model(module: FineTuner, folder: Path, task: str) -> Path:
    """Write the encoder, tokenizer and head of `module` into `folder` (replaced if it exists), atomically."""
    partial, previous = folder.with_name(f".{folder.name}.partial"), folder.with_name(f".{folder.name}.previous")
    for leftover in (partial, previous):  # of an export that was killed
        shutil.rmtree(leftover, ignore_errors=True)
    partial.mkdir(parents=True)
    write_model(module, partial, task)
    if folder.exists():
        os.replace(folder, previous)
    os.replace(partial, folder)
    shutil.rmtree(previous, ignore_errors=True)
    return folder


def write_model(module: FineTuner, folder: Path, task: str) -> None:
    module.encoder.save_pretrained(folder, safe_serialization=True)
    module.tokenizer.save_pretrained(folder)
    save_file({name: tensor.detach().cpu().contiguous() for name, tensor in module.head.state_dict().items()},
              folder / HEAD_FILE)
    about = {"task": task, "kind": module.kind, "labels": module.labels, "metric": module.hparams.metric}
    (folder / TASK_FILE).write_text(json.dumps(about, indent=2) + "\n", encoding="utf-8")
    record_export_hashes(folder)
    for path in folder.iterdir():
        give_default_permissions(path)
