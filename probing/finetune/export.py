"""The best fine-tuned model as a Hugging Face folder: the hand-off to probing and geometry (DESIGN.md).

`<run>/model/` holds the encoder (`save_pretrained`, safetensors) and its tokenizer, so that `extract.py` and
`probe.py` load it with `model.name_or_path=<run>/model` exactly like a pretrained model (the store's weights hash
tells them apart), plus the task head (`task_head.safetensors`) and `task.json` (task, labels, kind) for users who
want the classifier itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from probing.features.finetuned import TASK_FILE
from probing.finetune.module import FineTuner


def load_checkpoint_weights(module: FineTuner, checkpoint: str | Path) -> None:
    """Put a Lightning checkpoint's weights into `module`, loading only tensors and plain values."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    module.load_state_dict(state)


def export_model(module: FineTuner, folder: Path, task: str) -> Path:
    """Write the encoder, tokenizer and head of `module` into `folder` (replaced if it exists)."""
    folder.mkdir(parents=True, exist_ok=True)
    module.encoder.save_pretrained(folder, safe_serialization=True)
    module.tokenizer.save_pretrained(folder)
    save_file({name: tensor.detach().cpu().contiguous() for name, tensor in module.head.state_dict().items()},
              folder / "task_head.safetensors")
    about = {"task": task, "kind": module.kind, "labels": module.labels}
    (folder / TASK_FILE).write_text(json.dumps(about, indent=2) + "\n", encoding="utf-8")
    return folder
