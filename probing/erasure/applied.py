"""An eraser in a probe.py run (`erase=`, docs/erasure.md "What a run does"): the concept's data, the eraser fitted
on its training words (or a saved one, refused when it was fitted on other features) with the random control of its
rank, its record in results.json and its file, and every split of the probed task erased."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from probing.data.concepts import concept_source
from probing.data.word_tasks import read_word_task
from probing.erasure.file import load_eraser, save_eraser
from probing.erasure.fitted import FittedEraser
from probing.erasure.leace import LeaceEraser
from probing.erasure.on_device import erased_on
from probing.erasure.random_control import RandomEraser, random_control
from probing.erasure.setup import ErasureSetup
from probing.errors import ConfigError, setting, settings_under
from probing.features.identity import FeatureIdentity, settings_differences

ConceptSplits = dict[str, tuple[Tensor, Tensor]]


def concept_data(erase: ErasureSetup, task_name: str, task_source: object, task_data: Any) -> Any:
    """The concept's word-task data: the probed task's own when the concept is the task (no second read)."""
    with settings_under("erase"):
        source = concept_source(erase.concept, task_name, task_source)
    return task_data if source is task_source else read_word_task(source, erase.concept)


def fit_eraser(erase: ErasureSetup, concept: ConceptSplits, num_classes: int, fitted_on: Mapping[str, Any],
               concept_name: str) -> tuple[FittedEraser, FittedEraser, dict[str, Any]]:
    """The eraser (fitted, or the saved one checked against `fitted_on`), the random control of its rank, and what
    results.json records of them. Both are fitted on `erase.device` and returned on the CPU."""
    train_x, train_y = (tensor.to(erase.device) for tensor in concept["train"])
    if erase.path is not None:
        fitted, about = load_eraser(erase.path)
        check_fitted_on(fitted, about, erase, fitted_on, concept_name)
    else:
        eraser = erase.eraser
        if isinstance(eraser, RandomEraser) and eraser.rank is None:  # as many directions as LEACE erases
            eraser = random_control(LeaceEraser().fit(train_x, train_y, num_classes), eraser.seed)
        held_out = tuple(tensor.to(erase.device) for tensor in concept["dev"]) if "dev" in concept else None
        with settings_under("erase.eraser"):  # what the eraser refuses once it sees the features
            fitted = eraser.fit(train_x, train_y, num_classes, held_out=held_out).to("cpu")
    control = random_control(fitted, erase.control_seed).fit(train_x, train_y, num_classes).to("cpu")
    record = {"concept": concept_name, "method": fitted.method, "rank": fitted.rank,
              "dropped_dims": list(fitted.dropped_dims), "fitted_on_words": len(train_y), "about": fitted.about,
              "control_rank": control.rank, "control_seed": erase.control_seed, "device": erase.device.type,
              "loaded_from": str(erase.path) if erase.path is not None else None}
    return fitted, control, record


def check_fitted_on(fitted: FittedEraser, about: Mapping[str, Any], erase: ErasureSetup,
                    current: Mapping[str, Any], concept_name: str) -> None:
    """A saved eraser applies only to the features it was fitted on (`about`: the model and its weights, the
    layer, ...) and the concept it erases, and only for the method and settings of erase= (it is applied, not
    refitted, so a setting of erase.eraser that differs from its fit would be ignored; a null one, the random
    control's rank, takes the file's)."""
    settings = {f"eraser.{key}": value for key, value in erase.eraser.settings().items() if value is not None}
    saved = {"concept": about.get("concept"), "method": fitted.method,
             **{key: fitted.about.get(key.removeprefix("eraser.")) for key in settings}}
    wanted = {"concept": concept_name, "method": erase.method, **settings}
    found = [*FeatureIdentity.of(about).differences(FeatureIdentity.of(current)),
             *settings_differences(saved, wanted, list(saved))]
    if found:
        path = setting("erase.path")
        raise ConfigError(f"{path}={erase.path} was fitted on other features, concept or settings than this "
                          f"run's: {'; '.join(found)}. Fix: {path}=null (fit one here), or the settings it was "
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
        save_eraser(self.fitted, path, {**FeatureIdentity.of(self.fitted_on).recorded(),
                                        "concept": self.record["concept"], "concept_labels": self.labels})
        self.record["eraser_file"] = str(path)


def check_own_concept(erase: ErasureSetup, task_name: str) -> None:
    """A task without other labels on its data (the s-class task) erases its own."""
    if erase.concept not in (None, task_name):
        concept = setting("erase.concept")
        raise ConfigError(f"{concept}={erase.concept}: task={task_name} erases its own labels. Fix: "
                          f"{concept}={task_name} (or null)")


def erase_splits(datamodule: Any, fitted: FittedEraser, device: torch.device) -> None:
    """Every split's word vectors replaced by their erased version (float32), computed on `device`."""
    for gathered in datamodule.splits.values():
        gathered.vectors = erased_on(fitted, gathered.vectors, device)


def erase_tensor_splits(splits: Mapping[str, Any], fitted: FittedEraser, device: torch.device) -> None:
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
