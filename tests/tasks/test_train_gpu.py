"""train.py on a CUDA GPU (marked `gpu`, skipped without one): trainer=gpu fine-tunes the tiny BERT with float16
mixed precision for one epoch and exports a model folder that loads like a pretrained one."""

from __future__ import annotations

import json

import pytest

from probing.features.finetuned import finetuned_task
from probing.tasks import train
from tests.helpers.run_if import run_if
from tests.helpers.runs import compose_job

pytestmark = [pytest.mark.gpu, run_if(min_gpus=1)]


def test_one_epoch_of_16_mixed_fine_tuning_on_the_gpu(tmp_path, tiny_bert_path):
    results = train.run(compose_job("train", tmp_path, f"model.name_or_path={tiny_bert_path}", "logger=csv",
                                    "task.batch_size=64", "trainer=gpu", "trainer.precision=16-mixed",
                                    "trainer.max_epochs=1"))
    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["precision"] == "16-mixed" and results["devices"] == 1
    assert results["epochs_trained"] == 1 and results["best_epoch"] == 0
    assert 0.0 <= results["dev"]["accuracy"] <= 1.0
    assert finetuned_task(results["model_dir"]) == "pos" and (run / "model" / "model.safetensors").is_file()
