"""Composing the entry scripts' configs in-process (Hydra's compose API), for runs where a subprocess is not what is
being tested."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from tests.helpers import CONFIG_DIR


def compose_job(config: str, tmp_path: Path, *overrides: str) -> DictConfig:
    """The config of `python <config>.py <overrides>` with its run folder at tmp_path/run and its stores at
    tmp_path/stores (Hydra's runtime folder does not exist outside a Hydra app)."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config, overrides=[f"paths.output_dir={tmp_path / 'run'}",
                                          f"paths.store_dir={tmp_path / 'stores'}", *overrides])


def probe_in_process(tmp_path: Path, name: str, *overrides: str) -> dict:
    """`python probe.py <overrides>` composed and run in this process, its run folder tmp_path/name/run; its
    results.json is checked to hold what the run returned."""
    import json

    from probing.tasks import probe

    results = probe.run(compose_job("probe", tmp_path / name, *overrides))
    assert json.loads((tmp_path / name / "run" / "results.json").read_text()) == json.loads(json.dumps(results))
    return results


def tiny_model(tiny_bert_path: Path) -> list[str]:
    """Overrides that put the tiny random BERT of the tests (2 transformer layers: hidden states 0..2) in place."""
    return [f"model.name_or_path={tiny_bert_path}", "model.num_layers=3", "logger=csv"]


def fake_finetuned_model(tiny_bert_path: Path, folder: Path, task: str, seed: int = 1) -> Path:
    """The tiny BERT with every weight moved (seeded), saved as train.py exports a fine-tuned model: a Hugging Face
    folder with task.json, `folder` (name it `<run>/model`)."""
    import json

    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_bert_path)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * parameter.std().nan_to_num(0.0) * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_path).save_pretrained(folder)
    (folder / "task.json").write_text(json.dumps({"task": task, "kind": "token", "labels": ["X"]}))
    return folder
