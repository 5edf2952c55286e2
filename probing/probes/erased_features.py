"""The fresh probes of probe.py's guardedness report (docs/erasure.md, "The guardedness report"): linear probes of
the concept fitted to convergence and an MLP-1 `WordProbe` on the erased words, beside the random control's words and
the words before erasure; and the concept's word vectors read from its stores."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L

from probing.data.splits import EVAL_SPLITS
from probing.erasure.applied import ConceptSplits
from probing.erasure.fitted import FittedEraser
from probing.erasure.guardedness import converged_linear_accuracy, guardedness
from probing.errors import ConfigError
from probing.probes.bits.information import majority_rates
from probing.probes.callbacks import KeepBestWeights
from probing.probes.components.families import ProbeFamily, mlp1
from probing.probes.datamodule import ALL_LAYERS, ProbingDataModule, TensorSplit
from probing.probes.word_data import WordTaskDataModule
from probing.probes.word_probe import WordProbe

GUARDEDNESS_SPLITS = ("train", "test")  # where the eraser was fitted, and unseen words


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
