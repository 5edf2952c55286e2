"""What probe.py does with `erase=` (conf/erase/, `probing.features.erasure_setup.ErasureSetup`): a concept erased
from the representation before the task is probed (Ravfogel et al. 2020; Elazar et al. 2021; Belrose et al. 2023).

1. The concept's words (`probing.data.concepts`: the probed task's own labels, or a CoNLL-U column of its corpus)
   are read from their every-word stores in the representation being probed: same model, layer, pooling, context. A
   word-pair concept (deprel) labels its dependent.
2. The eraser is fitted on the concept's training words (held-out: its dev words, for INLP's stopping rule), or a
   saved one is loaded (`erase.path`) and refused when it was fitted on other features. `erase=random` without a
   rank takes the rank of LEACE fitted on the same words.
3. The random control of the same rank (`erase.control_seed`) is fitted beside it.
4. The eraser is applied to every split of the probed task's word vectors; the probe then trains as it would.
5. The guardedness report (`results.json` "erasure"): the eraser's rank and what it dropped, the edit's size, the
   cross-covariance left with the concept and the class means' spread (`probing.features.erasure.guardedness`), and
   fresh probes of the concept trained on the erased training words and scored on dev and test: a linear one (what
   LEACE and INLP guard against), an MLP-1 (which they do not guard against: it can recover a concept that no
   linear probe finds) and a linear one on the random control's words, beside the majority rate and a linear probe
   on the words before erasure. Each number says which probe it is.

The linear fresh probes are logistic regressions fitted to convergence (INLP's classifier): the question is what a
linear probe can read, which an optimiser stopped early answers only approximately. The MLP-1 is a `WordProbe`
trained by a Lightning Trainer of its own (no logger, no checkpoint files), its best dev epoch's weights scored, as
every probe of this project.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor

from probing.data.concepts import concept_source
from probing.data.splits import EVAL_SPLITS
from probing.data.word_tasks import read_word_task
from probing.errors import ConfigError
from probing.features.erasure import (
    FittedEraser,
    LeaceEraser,
    RandomEraser,
    guardedness,
    load_eraser,
    save_eraser,
    softmax_regression,
)
from probing.features.erasure_setup import ErasureSetup, random_control
from probing.probes.bits.information import majority_rates
from probing.probes.callbacks import KeepBestWeights
from probing.probes.components.families import ProbeFamily, mlp1
from probing.probes.datamodule import ALL_LAYERS, ProbingDataModule, TensorSplit
from probing.probes.saved import differences
from probing.probes.word_data import WordTaskDataModule
from probing.probes.word_probe import WordProbe

log = logging.getLogger(__name__)

GUARDEDNESS_SPLITS = ("train", "test")  # where the eraser was fitted, and unseen words
# What an eraser records of the features it was fitted on, checked before a saved one is applied.
FITTED_ON = ("model_name_or_path", "weights_sha256", "pooling", "context_size", "attention_window",
             "attention_policy", "layer", "representation")

ConceptSplits = dict[str, tuple[Tensor, Tensor]]


def concept_data(setup: ErasureSetup, task_name: str, task_source: object, task_data: Any) -> Any:
    """The concept's word-task data: the probed task's own when the concept is the task (no second read)."""
    source = concept_source(setup.concept, task_name, task_source)
    return task_data if source is task_source else read_word_task(source, f"erase.concept={setup.concept}")


def check_erasable(layer: Any) -> None:
    """An eraser is fitted on one layer's vectors; the scalar mix learns its weights over all of them."""
    if layer == ALL_LAYERS:
        raise ConfigError("erase= fits an eraser on one layer's word vectors, and layer=mix mixes all layers while "
                          "the probe trains. Fix: layer=N (one layer), or erase=none")


def concept_splits(stores: Mapping[str, Path], data: Any, layer: int, expected_layers: int | None) -> ConceptSplits:
    """(vectors (N, D) float32, labels (N,)) of each split of the concept: each example's (first) word."""
    datamodule = WordTaskDataModule(stores, data, layer=layer, expected_layers=expected_layers)
    datamodule.setup()
    return example_words(datamodule)


def example_words(datamodule: WordTaskDataModule) -> ConceptSplits:
    """(vectors (N, D) float32, labels (N,)) of each split of a word task's datamodule: each example's (first)
    word."""
    return {split: (gathered.vectors[gathered.rows].float(), gathered.tensors["label"])
            for split, gathered in datamodule.splits.items()}


def fit_eraser(setup: ErasureSetup, concept: ConceptSplits, num_classes: int, fitted_on: Mapping[str, Any],
               concept_name: str) -> tuple[FittedEraser, FittedEraser, dict[str, Any]]:
    """The eraser (fitted, or the saved one checked against `fitted_on`), the random control of its rank, and what
    results.json records of them. Both are fitted on `setup.device` and returned on the CPU."""
    train_x, train_y = (tensor.to(setup.device) for tensor in concept["train"])
    if setup.path is not None:
        fitted, about = load_eraser(setup.path)
        check_fitted_on(fitted, about, setup, fitted_on, concept_name)
    else:
        eraser = setup.eraser
        if isinstance(eraser, RandomEraser) and eraser.rank is None:  # as many directions as LEACE erases
            eraser = random_control(LeaceEraser().fit(train_x, train_y, num_classes), eraser.seed)
        held_out = tuple(tensor.to(setup.device) for tensor in concept["dev"]) if "dev" in concept else None
        fitted = eraser.fit(train_x, train_y, num_classes, held_out=held_out).to("cpu")
    control = random_control(fitted, setup.control_seed).fit(train_x, train_y, num_classes).to("cpu")
    record = {"concept": concept_name, "method": fitted.method, "rank": fitted.rank,
              "dropped_dims": list(fitted.dropped_dims), "fitted_on_words": len(train_y), "about": fitted.about,
              "control_rank": control.rank, "control_seed": setup.control_seed, "device": setup.device.type,
              "loaded_from": str(setup.path) if setup.path is not None else None}
    return fitted, control, record


def check_fitted_on(fitted: FittedEraser, about: Mapping[str, Any], setup: ErasureSetup,
                    current: Mapping[str, Any], concept_name: str) -> None:
    """A saved eraser applies only to the features it was fitted on (`about`: the model and its weights, the
    layer, ...) and the concept it erases, and only for the method and settings of erase= (it is applied, not
    refitted, so a setting of erase.eraser that differs from its fit would be ignored; a null one, the random
    control's rank, takes the file's)."""
    settings = {f"eraser.{key}": value for key, value in setup.eraser.settings().items() if value is not None}
    saved = {**{key: about.get(key) for key in (*FITTED_ON, "concept")}, "method": fitted.method,
             **{key: fitted.about.get(key.removeprefix("eraser.")) for key in settings}}
    wanted = {**{key: current.get(key) for key in FITTED_ON}, "concept": concept_name, "method": setup.method,
              **settings}
    found = differences(saved, wanted, keys=list(saved))
    if found:
        raise ConfigError(f"erase.path={setup.path} was fitted on other features, concept or settings than this "
                          f"run's: {'; '.join(found)}. Fix: erase.path=null (fit one here), or the settings it was "
                          "fitted with")


@dataclass
class Erasure:
    """What an erasure did in a run: the fitted eraser, its results.json record, the features it was fitted on and
    the concept's labels."""

    fitted: FittedEraser
    record: dict[str, Any]
    fitted_on: Mapping[str, Any]
    labels: list[str]

    def save(self, path: Path) -> None:
        """The eraser as `path` (hashed; `erase.path` applies it again to the same features), named in the record."""
        save_eraser(self.fitted, path, {**{key: self.fitted_on.get(key) for key in FITTED_ON},
                                        "concept": self.record["concept"], "concept_labels": self.labels})
        self.record["eraser_file"] = str(path)


def check_own_concept(setup: ErasureSetup, task_name: str) -> None:
    """A task without other labels on its data (the s-class task) erases its own."""
    if setup.concept not in (None, task_name):
        raise ConfigError(f"erase.concept={setup.concept}: task={task_name} erases its own labels. Fix: "
                          f"erase.concept={task_name} (or null)")


def guardedness_report(fitted: FittedEraser, control: FittedEraser, concept: ConceptSplits, labels: list[str],
                       seed: int, epochs: int) -> dict[str, Any]:
    """The guardedness of `fitted` on the concept's words (see the module docstring)."""
    num_classes = len(labels)
    report: dict[str, Any] = {split: guardedness(fitted, *concept[split], num_classes)
                              for split in GUARDEDNESS_SPLITS if split in concept}
    report["majority_rate"] = majority_rates(concept["train"][1], {split: y for split, (_, y) in concept.items()})[1]
    versions = {"before": lambda x: x, "erased": fitted, "random_control": control}
    probes: dict[str, dict[str, Any]] = {}
    for version, transform in versions.items():
        splits = {split: (transform(x), y) for split, (x, y) in concept.items()}
        probes[f"linear_{version}"] = converged_linear_accuracy(splits, num_classes)
        if version == "erased":
            probes["mlp1_erased"] = fresh_probe_accuracy(mlp1(hidden_dim=1000), splits, labels, seed, epochs)
    report["fresh_probes"] = probes
    return report


def converged_linear_accuracy(splits: ConceptSplits, num_classes: int) -> dict[str, float]:
    """Dev and test accuracy of a multinomial logistic regression of the concept fitted to convergence on
    `splits["train"]` (L-BFGS in float64 from zero, INLP's classifier): what a linear probe can read, not how far an
    optimiser got (an Adam-trained probe that has not converged can score below the majority rate after erasure)."""
    train_x, train_y = splits["train"]
    weights, bias = softmax_regression(train_x.double(), train_y, num_classes)
    return {split: float(((x.double() @ weights.T + bias).argmax(dim=1) == y).float().mean())
            for split, (x, y) in splits.items() if split in EVAL_SPLITS}


def fresh_probe_accuracy(family: ProbeFamily, splits: ConceptSplits, labels: list[str], seed: int,
                         epochs: int) -> dict[str, float]:
    """Dev and test accuracy of a fresh `family` probe of the concept, trained on `splits["train"]` for `epochs`,
    its best dev epoch's weights kept."""
    with quiet_lightning():
        return _fresh_probe_accuracy(family, splits, labels, seed, epochs)


def _fresh_probe_accuracy(family: ProbeFamily, splits: ConceptSplits, labels: list[str], seed: int,
                          epochs: int) -> dict[str, float]:
    L.seed_everything(seed, workers=True, verbose=False)
    datamodule = ProbingDataModule({split: TensorSplit({"features": x, "label": y}) for split, (x, y) in
                                    splits.items()}, batch_size=256)
    module = WordProbe(labels=labels, input_dim=splits["train"][0].shape[1], num_layers=None, level="context",
                       control=False, mdl_block_ends=None, family=family)
    trainer = L.Trainer(max_epochs=epochs, accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[KeepBestWeights(monitor="dev/accuracy", mode="max")])
    trainer.fit(module, datamodule=datamodule)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)
    return {split: float(module.split_metrics[split]["accuracy"]) for split in EVAL_SPLITS
            if split in module.split_metrics}


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's notes on devices and on fitting stopped, silenced for the fresh probes (the run's own probe says
    them once)."""
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        lightning_log.setLevel(level)


def erased_on(fitted: FittedEraser, vectors: Tensor, device: torch.device) -> Tensor:
    """`vectors` erased on `device` (float32), returned where they were."""
    return fitted(vectors.to(device).float()).to(vectors.device)


def erase_splits(datamodule: WordTaskDataModule, fitted: FittedEraser, device: torch.device) -> None:
    """Every split's word vectors replaced by their erased version (float32), computed on `device`."""
    for gathered in datamodule.splits.values():
        gathered.vectors = erased_on(fitted, gathered.vectors, device)


def erase_tensor_splits(splits: Mapping[str, TensorSplit], fitted: FittedEraser, device: torch.device) -> None:
    """The same for splits holding one vector per example (the s-class task's contexts or word types)."""
    for split in splits.values():
        split.tensors["features"] = erased_on(fitted, split.tensors["features"], device)


def describe(record: Mapping[str, Any]) -> str:
    """One log line about the erasure."""
    test = record["guardedness"]["fresh_probes"]
    majority = record["guardedness"]["majority_rate"].get("test", float("nan"))
    return (f"erased {record['concept']} ({record['method']}, rank {record['rank']}); fresh probes of the concept, "
            f"test accuracy: linear {test['linear_erased'].get('test', np.nan):.3f} (before "
            f"{test['linear_before'].get('test', np.nan):.3f}, random control "
            f"{test['linear_random_control'].get('test', np.nan):.3f}, majority {majority:.3f}), MLP-1 "
            f"{test['mlp1_erased'].get('test', np.nan):.3f}")
