"""The models of the amnesic-probing tests, built from the tiny random BERT: a tagger or classifier exported as train.py
exports one (untrained: a seeded head), and a masked LM."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from probing.finetune.export import export_model
from probing.finetune.module import FineTuner


def exported_finetuned(tiny_bert_path: Path, folder: Path, task: str, labels: list[str], kind: str = "token",
                       seed: int = 0, metric: str = "accuracy") -> Path:
    """The tiny BERT with a seeded task head, exported by train.py's own export (`folder`: name it <run>/model)."""
    torch.manual_seed(seed)
    module = FineTuner(str(tiny_bert_path), labels, kind, metric=metric)
    return export_model(module.eval(), folder, task)


def saved_masked_lm(tiny_bert_path: Path, folder: Path, seed: int = 0) -> Path:
    """A random BertForMaskedLM of the tiny BERT's shape and vocabulary, saved with its tokenizer."""
    torch.manual_seed(seed)
    BertForMaskedLM(BertConfig.from_pretrained(tiny_bert_path)).eval().save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_path).save_pretrained(folder)
    return folder
