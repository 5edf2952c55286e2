"""probe.py on a statement task (task=truth, task=statements): one label per text, read from one vector of the whole
text (features.pooling: its last piece, the paper's protocol, or the mean of its pieces), with the word task's
multi-class probe (`WordProbe`) and its controls; the mass-mean family is fitted in closed form. See
docs/statements.md."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from probing.data.statements import read_statement_task
from probing.erasure import applied
from probing.erasure.file import ERASER_FILE
from probing.errors import ConfigError, setting
from probing.features.provision import ensure_features
from probing.probes import erased_features
from probing.probes.bits.mdl import OnlineCode
from probing.probes.controls import ControlPart
from probing.probes.datamodule import ProbingDataModule, read_every_word_store
from probing.probes.generalisation import principal_components, scored_on
from probing.probes.probe_module import ProbeModule
from probing.probes.representations import EncoderLayer, LayerMix, ProbeInputs, described_featurizer, features_about
from probing.probes.task_probes import WordProbing, refuse_conditioning, refuse_pair_product
from probing.probes.word_data import GatheredSplit
from probing.results.kinds import StatementProbeResults

PCA_STATEMENTS = 2000  # the principal components of at most this many statements' vectors: a plot's worth
CONTROL_KIND = "shuffled_labels"  # what a statement task's control task is (results' control_task.kind)


def shuffled_labels(labels: np.ndarray, seed: int, split_index: int) -> np.ndarray:
    """The control labels of one split: its labels in an order drawn from (seed, split_index), so that each split
    keeps its class balance exactly while a label says nothing of its text."""
    return labels[np.random.default_rng([seed, split_index]).permutation(len(labels))]


class StatementDataModule(ProbingDataModule):
    """The train/dev/test statements of a `StatementTaskData`, one vector per statement read from the split's store
    (`layer`, or every layer for the scalar mix). A statement the encoder could not represent (flagged in the store,
    e.g. longer than features.max_length) is left out and counted in `dropped`. With `control_seed`, each split also
    carries `control_label`: its labels shuffled (`shuffled_labels`). With `online_code`, the training statements get
    their position in its seeded order (`order`)."""

    def __init__(self, stores: Mapping[str, str | Path], data: Any, layer: int | str, batch_size: int = 256,
                 control_seed: int | None = None, expected_layers: int | None = None,
                 online_code: OnlineCode | None = None):
        super().__init__(batch_size=batch_size)
        self.stores, self.data, self.layer = dict(stores), data, layer
        self.control_seed, self.expected_layers, self.online_code = control_seed, expected_layers, online_code
        self.dropped: dict[str, int] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        for index, (name, path) in enumerate(self.stores.items()):
            split = self.data.splits[name]
            vectors, position = read_every_word_store(Path(path), self.layer, len(split), self.expected_layers)
            kept = position >= 0
            self.dropped[name] = int((~kept).sum())
            labels = split.label[kept].astype(np.int64)
            tensors = {"label": torch.from_numpy(labels)}
            if self.control_seed is not None:
                tensors["control_label"] = torch.from_numpy(shuffled_labels(labels, self.control_seed, index))
            if self.online_code is not None and name == "train":
                tensors["order"] = torch.from_numpy(self.online_code.order(int(kept.sum())))
            self.splits[name] = GatheredSplit(vectors, torch.from_numpy(position[kept]), None, tensors)


class StatementProbing(WordProbing):
    """A statement task (see the module docstring). What a statement has no use for is refused: word pairs,
    conditioning on another representation, a baseline or type-level representation, erasing another concept than
    the task's labels, and the online code with a closed-form family."""

    RESULTS_KIND = StatementProbeResults.KIND  # the kind of its results.json
    CLOSED_FORM = True
    SCORES_OTHER_DATA = True

    def __init__(self, data_name: str, **shared: Any):
        super().__init__(data_name=data_name, **shared)
        refuse_pair_product(self.name, self.pair_product)
        refuse_conditioning(self.name, self.condition_on)
        if self.family is not None and self.family.closed_form and self.online_code is not None:
            raise ConfigError(f"the online code (MDL) trains its prefix probes by gradient steps, and probe="
                              f"{self.family.name} is fitted in closed form. Fix: turn the online code off, or "
                              "probe=linear")
        if self.eval_on and self.erase is not None:
            raise ConfigError(f"{setting('eval_on')} scores the probe on other datasets' statements, which an eraser "
                              f"fitted on this dataset's has not seen. Fix: {setting('eval_on')}=[], or no erasure")
        self.others: dict[str, Any] = {}  # the datasets of eval_on, read by `load`
        self.other_splits: dict[str, Any] = {}  # their test statements' vectors, once the inputs are built

    def load(self) -> None:
        self.data = read_statement_task(self.source, self.data_name)
        for name in self.eval_on:
            try:
                other = self.source.other(name)
            except ValueError as error:
                raise ConfigError(f"{setting('eval_on')} names datasets beside {self.data.name}, and {error}. Fix: "
                                  f"{setting('eval_on')}=[], or datasets of the same data (data=geometry_of_truth: "
                                  "its files' names; the bundled comparisons: larger_than, smaller_than)") from None
            self.others[name] = read_statement_task(other, self.data_name)
            if self.others[name].labels != self.data.labels:
                raise ConfigError(f"{setting('eval_on')}: {name} has the labels {self.others[name].labels} and "
                                  f"{self.data.name} {self.data.labels}: a probe scores only the labels it learned. "
                                  f"Fix: leave {name} out of {setting('eval_on')}")

    def word_inputs(self, representation: Any, store_settings: Mapping[str, Any]) -> ProbeInputs:
        """The statements' stores (one vector per statement, filled by the representation's own encoder), then the
        datamodule over them."""
        if not isinstance(representation, (EncoderLayer, LayerMix)):
            raise ConfigError(f"task={self.name} reads a layer of an encoder (its vector of each whole text); "
                              f"{representation.label} is not one. Fix: layer=N or layer=mix, with no baseline and "
                              "at the context level")
        described = described_featurizer(representation.featurizer)
        stores = ensure_features(self.data.store_data(), representation.featurizer, **store_settings)
        other_stores = {name: ensure_features(other.store_data(), representation.featurizer, splits=("test",),
                                              **store_settings) for name, other in self.others.items()}
        representation.featurizer = None  # the encoder's memory is let go before training
        datamodule = StatementDataModule(stores, self.data, representation.store_layer, self.batch_size,
                                         self.control.seed, representation.expected_layers, self.online_code)
        datamodule.setup()
        self.other_splits = {}
        for name, paths in other_stores.items():
            other = StatementDataModule(paths, self.others[name], representation.store_layer, self.batch_size,
                                        None, representation.expected_layers)
            other.setup()
            self.other_splits[name] = (other.splits["test"], other.dropped["test"])
        about = {**representation.about_stores(stores), "data_split": dict(self.data.split),
                 "data_summary": {split: {"statements": len(self.data.splits[split]) - datamodule.dropped[split],
                                          "dropped": datamodule.dropped[split], **counts}
                                  for split, counts in self.data.summary().items()},
                 "data_skips": self.data.skips.as_dict()}
        labels = list(self.data.labels)
        features = features_about(described, representation.level, labels, datamodule, about, self.control,
                                  self.data.name)
        return ProbeInputs(datamodule, labels, about, representation.level, features)

    def erased_inputs(self, representation: Any, store_settings: Mapping[str, Any]) -> ProbeInputs:
        """The statements' inputs with their own labels erased (the eraser fitted on the training statements)."""
        erased_features.check_erasable(representation.store_layer)
        applied.check_own_concept(self.erase, self.name)
        inputs = self.word_inputs(representation, store_settings)
        self.erase_concept(inputs, erased_features.example_words(inputs.datamodule), list(self.data.labels),
                           self.name, lambda fitted: applied.erase_splits(inputs.datamodule, fitted,
                                                                          self.erase.device))
        return inputs

    def new_module(self, inputs: ProbeInputs) -> ProbeModule:
        if self.family.closed_form:
            self.family.check_fits(len(inputs.classes), inputs.datamodule.num_layers)
        return super().new_module(inputs)

    def keepers(self, inputs: ProbeInputs) -> list[L.Callback]:
        return [] if self.family.closed_form else super().keepers(inputs)

    def fit(self, trainer: L.Trainer, module: ProbeModule, inputs: ProbeInputs, run_dir: Path) -> dict[str, Any]:
        """Gradient training (`TaskProbing.fit`), or for a closed-form family (mass-mean) its weights computed from
        the training statements, Lightning's fit loop bypassed (the Trainer then only scores dev and test)."""
        if not self.family.closed_form:
            return super().fit(trainer, module, inputs, run_dir)
        train = inputs.datamodule.splits["train"]
        features = train.features(train.rows, None)
        heads = [(module.probes, train.tensors["label"])]
        if module.has_control:  # the control task's part's head, fitted on the control labels
            heads.append((module.parts[ControlPart.NAME].probes, train.tensors["control_label"]))
        for head, labels in heads:
            weight, bias = self.family.fit(features, labels, len(inputs.classes))
            with torch.no_grad():
                head.mlps.w1[0].copy_(weight)
                head.mlps.b1[0].copy_(bias)
        if self.erasure is not None and trainer.is_global_zero:
            self.erasure.save(run_dir / ERASER_FILE)
        return {"best_epoch": None, "fitted": "closed form (no gradient steps)", "warnings": []}

    def results(self, module: ProbeModule, inputs: ProbeInputs) -> dict[str, Any]:
        control = None if self.control.seed is None else {"kind": CONTROL_KIND, "seed": self.control.seed}
        return {"labels": list(inputs.classes), "control_task": control,
                **({} if self.erasure is None else {"erasure": self.erasure.record}),
                "eval_on": self.scores_on_others(module), "principal_components": self.components(inputs)}

    def scores_on_others(self, module: ProbeModule) -> dict[str, Any]:
        """The probe's scores on the test split of each dataset of eval_on, with how that split was drawn (seed,
        fractions, the file's lines it holds) and its statements per label."""
        scores = {}
        for name, (split, dropped) in self.other_splits.items():
            other = self.others[name]
            scores[name] = {**scored_on(module, split), "dropped": dropped, "labels": other.summary()["test"],
                            "data_split": dict(other.split), "data_files": [str(path) for path in other.files],
                            "test_lines": [int(source.rsplit(":", 1)[1]) for source in other.splits["test"].sources]}
        return scores

    def components(self, inputs: ProbeInputs) -> dict[str, Any] | None:
        """The first two principal components of the statements' vectors (train, dev and test; at most
        PCA_STATEMENTS of them, drawn with the run's seed) at the probed layer, by label (Marks & Tegmark's Fig. 1);
        None for a scalar mix of layers."""
        splits = inputs.datamodule.splits
        if inputs.datamodule.num_layers is not None:
            return None
        counts = [len(splits[name]) for name in splits]
        drawn = np.arange(sum(counts))
        if len(drawn) > PCA_STATEMENTS:
            drawn = np.sort(np.random.default_rng(self.seed).choice(len(drawn), PCA_STATEMENTS, replace=False))
        vectors, labels, start = [], [], 0
        for name, count in zip(splits, counts):  # only the drawn statements' vectors are gathered
            split, rows = splits[name], torch.from_numpy(drawn[(drawn >= start) & (drawn < start + count)] - start)
            vectors.append(split.features(split.rows[rows], None))
            labels.append(split.tensors["label"][rows])
            start += count
        vectors, labels = torch.cat(vectors).numpy(), torch.cat(labels).numpy()
        return {"splits": list(splits), "statements": sum(counts), **principal_components(vectors, labels)}
