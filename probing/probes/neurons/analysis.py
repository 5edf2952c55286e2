"""analyze.py analysis=neurons: which neurons (dimensions) of one layer carry a word task's labels, and what a probe
loses without them (Dalvi et al. 2019, "What Is One Grain of Sand in the Desert?"; Antverg & Belinkov 2022, "On the
Pitfalls of Analyzing Individual Neurons"; Gurnee et al. 2023, "Finding Neurons in a Haystack").

See docs/neurons.md, 'What a run computes' and 'Choices where the papers leave room'.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import Tensor

from probing.analysis import Analysis, AnalysisInputs, analysis_device
from probing.config import build
from probing.data.settings import choose, optional_int, require_bool, require_int, require_number
from probing.data.task_records import WORD_KINDS
from probing.errors import ConfigError, setting, settings_under
from probing.features.featurizers import featurizer_of
from probing.features.provision import lock_wait_seconds
from probing.probes.bits.information import majority_rates
from probing.probes.components.batched_probes import BatchedProbes
from probing.probes.components.families import linear, mlp1
from probing.probes.neurons import rankings as neurons
from probing.probes.neurons.probes import NeuronProbes, accuracies, fit
from probing.probes.representations import EncoderLayer, ProbeInputs
from probing.probes.task_probes import WordProbing
from probing.report import neurons as neurons_report

log = logging.getLogger(__name__)

CONTROL = "random"  # the ranking that always runs, as the control of the others
SPLITS = ("train", "dev", "test")
WORD_TASKS_FIX = "task=upos (a word task: upos, xpos, deprel, feats, ner, pos, supersense or jsonl)"


class NeuronAnalysis(Analysis):
    """conf/analysis/neurons.yaml (see the module docstring), built by analyze.py with what it knows (`from_the_job`):
    the top-level `task=` (its `task.name`, `task.kind`, `data.name` and `data.source`), the features of probe.py
    (`encoder`: what fills the stores, of `model`, `features` and `context_size`; `configured_layers`:
    `model.num_layers`; `store`: where and how the stores are kept) and the seed. The layer is the top-level
    `layer`."""

    report = neurons_report
    instead_of_layer = None  # `layer` is the layer analysed
    from_the_job = ("task", "kind", "data_name", "source", "encoder", "configured_layers", "store", "seed")

    def __init__(self, name: str, task: str | None, kind: str | None, data_name: str | None,
                 source: Mapping[str, Any] | None, encoder: Mapping[str, Any], configured_layers: int | None,
                 store: Mapping[str, Any], rankings: Mapping[str, Mapping[str, Any]], ranking: str | Sequence[str],
                 l1: float, l2: float, epochs: int, patience: int | None, min_delta: float, batch_size: int,
                 lr: float, ablation: str, cross_check_hidden_dim: int, sparse_k: Sequence[int],
                 sparse_candidates: int, per_label: bool, per_label_top: int, device: str, seed: int):
        super().__init__(name, None, None, None)
        if task is None or source is None:
            raise ConfigError(f"task=null: analysis=neurons ranks the neurons that carry a word task's labels. Fix: "
                              f"{WORD_TASKS_FIX}")
        if kind not in WORD_KINDS:
            raise ConfigError(f"task={task} is not a word task (its kind is {kind}); analysis=neurons "
                              f"reads labelled words. Fix: {WORD_TASKS_FIX}")
        self.task, self.data_name = str(task), str(data_name)
        self.source = build(OmegaConf.create(dict(source)), "data.source")
        self.encoder, self.configured_layers, self.store = dict(encoder), configured_layers, dict(store)
        self.seed = require_int("seed", seed)
        self.rankings = chosen_rankings(rankings, ranking, self.seed)
        self.l1 = require_number(setting("l1"), l1, example="1e-3")
        self.l2 = require_number(setting("l2"), l2, example="1e-3")
        self.epochs = require_int(setting("epochs"), epochs, minimum=1)
        self.patience = optional_int(setting("patience"), patience, minimum=1, null="every epoch")
        self.min_delta = require_number(setting("min_delta"), min_delta, low=0.0, example="0.001")
        self.batch_size = require_int(setting("batch_size"), batch_size, minimum=1)
        self.lr = require_number(setting("lr"), lr, low=1e-12, example="1e-3")
        self.ablation = choose(setting("ablation"), ablation, neurons.FILLS)
        self.cross_check_hidden_dim = require_int(setting("cross_check_hidden_dim"), cross_check_hidden_dim,
                                                  minimum=1)
        self.sparse_k = sparse_k_list(sparse_k)
        self.sparse_candidates = require_int(setting("sparse_candidates"), sparse_candidates, minimum=1)
        self.per_label = require_bool(setting("per_label"), per_label)
        self.per_label_top = require_int(setting("per_label_top"), per_label_top, minimum=1)
        self.device = device

    def check_inputs(self, inputs: AnalysisInputs) -> None:
        if inputs.layer is None:
            raise ConfigError("layer=null: analysis=neurons ranks the neurons of one layer. Fix: layer=N (0 = the "
                              "embedding output, 1..L the transformer layers, -1 the top one), e.g. layer=3")

    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        device = analysis_device(self.device)
        words = self.word_inputs(inputs.layer)
        labels, data = list(words.classes), {split: split_tensors(words.datamodule.splits[split]) for split in SPLITS}
        num_neurons = data["train"][0].shape[1]
        self.check_sparse_within(num_neurons)
        probe, probe_epochs = self.train_probe(words, num_neurons, len(labels), device)
        full = {split: accuracies(probe, *data[split])[0] for split in ("dev", "test")}
        means = data["train"][0].mean(dim=0)
        evidence = neurons.Evidence(probe.w1[0].detach().cpu().double().numpy(),
                                    neurons.class_means(*data["train"], len(labels)))
        orders = {name: ranking.order(evidence) for name, ranking in self.rankings.items()}
        ks = neurons.k_values(num_neurons)
        log.info("neurons of %s layer %s: %d labels, %d neurons; the elastic-net probe's test accuracy %.3f",
                 self.task, words.about["layer"], len(labels), num_neurons, full["test"])
        results = {
            **inputs.model.described(), **words.features, "task": self.task, "labels": labels,
            **{key: words.about[key] for key in ("layer", "representation", "stores", "data_summary", "data_skips",
                                                  "unseen_labels")},
            "neurons": num_neurons, "ks": ks, "settings": self.settings(),
            "probe": {"dev_accuracy": full["dev"], "test_accuracy": full["test"], "epochs_run": probe_epochs},
            "majority": majority(data["train"][1], data["test"][1], labels),
            "rankings": {name: order.tolist() for name, order in orders.items()},
            "ablation": self.ablation_curves(probe, orders, ks, data["test"], means),
            **self.retrained(words, orders, ks, num_neurons, len(labels), data["test"], device),
            "sparse": self.sparse(data, labels, evidence),
        }
        results["k_to_95"] = neurons_report.k_to_reach_table(results)
        if self.per_label:
            results["per_label"] = self.top_neurons(evidence, labels)
        run_dir.mkdir(parents=True, exist_ok=True)
        neurons_report.plot_curves([results], run_dir)
        log.info("%s", neurons_report.summary_line(results))
        return results

    def check_sparse_within(self, num_neurons: int) -> None:
        """The sparse probes' k and candidates at most the layer's neurons (more would be recorded but not used)."""
        for key, value, largest in (("sparse_k", self.sparse_k, max(self.sparse_k)),
                                    ("sparse_candidates", self.sparse_candidates, self.sparse_candidates)):
            if largest > num_neurons:
                raise ConfigError(f"{setting(key)}={value}: more than the layer's {num_neurons} neurons. Fix: "
                                  f"{setting(key)} at most {num_neurons}")

    def word_inputs(self, layer: Any) -> ProbeInputs:
        """The task's words at `layer`, as probe.py reads them: its stores filled (or reused) and its datamodule
        (WordProbing's data path only: no probe module, no control task, no online code)."""
        probing = WordProbing(data_name=self.data_name, name=self.task, source=self.source, module=None,
                              batch_size=self.batch_size, seed=self.seed)
        probing.load()
        representation = EncoderLayer(featurizer_of(self.encoder), layer, self.configured_layers)
        # analysis=neurons always runs as a multirun (conf/analysis/globals/neurons.yaml): null waits as there
        with settings_under("store"):
            store = {**self.store, "lock_wait_s": lock_wait_seconds(self.store.get("lock_wait_s"), in_multirun=True)}
        return probing.inputs(representation, store)

    def settings(self) -> dict[str, Any]:
        return {"l1": self.l1, "l2": self.l2, "epochs": self.epochs, "patience": self.patience,
                "min_delta": self.min_delta, "batch_size": self.batch_size, "lr": self.lr,
                "ablation": self.ablation, "cross_check": "mlp1", "cross_check_hidden_dim":
                self.cross_check_hidden_dim, "sparse_k": self.sparse_k, "sparse_candidates": self.sparse_candidates}

    def train_probe(self, words: ProbeInputs, num_neurons: int, num_labels: int,
                    device: torch.device) -> tuple[BatchedProbes, int]:
        """The elastic-net linear probe on every neuron, at its best dev epoch of all `epochs` (no early stop: its
        weights make the probe ranking, and the l1 term keeps sparsifying them after the accuracy has levelled off;
        one linear head is cheap); the epochs it trained."""
        probe = BatchedProbes(1, num_neurons, num_labels, linear(l1=self.l1, l2=self.l2))
        module = NeuronProbes({"probe": probe}, self.lr)
        fit(module, words.datamodule, self.epochs, device)
        return probe, module.epochs_run

    def ablation_curves(self, probe: BatchedProbes, orders: Mapping[str, np.ndarray], ks: list[int],
                        test: tuple[Tensor, Tensor], means: Tensor) -> dict[str, Any]:
        """The trained probe's test accuracy with the top-k and bottom-k neurons of each ranking (random-k: the
        control's first k) replaced by `analysis.ablation`."""
        features, labels = test

        def curve(order: np.ndarray) -> list[float]:
            return [accuracies(probe, neurons.ablated(features, order[:k], self.ablation, means), labels)[0]
                    for k in ks]

        ranked = {name: {"top": curve(order), "bottom": curve(order[::-1])} for name, order in orders.items()
                  if name != CONTROL}
        return {"fill": self.ablation, CONTROL: curve(orders[CONTROL]), **ranked}

    def retrained(self, words: ProbeInputs, orders: Mapping[str, np.ndarray], ks: list[int], num_neurons: int,
                  num_labels: int, test: tuple[Tensor, Tensor], device: torch.device) -> dict[str, Any]:
        """Test accuracy of the linear probes retrained on the top-k neurons of each ranking ("retrained") and of the
        MLP-1 cross-check ("cross_check"), every (ranking, k) a head of one batched model; their best epochs and the
        epochs the batched model trained."""
        names = list(orders)
        masks = neurons.selection_masks([orders[name] for name in names], ks, num_neurons)
        groups = {"retrained": BatchedProbes(len(masks), num_neurons, num_labels, linear(l1=self.l1, l2=self.l2),
                                             input_mask=masks),
                  "cross_check": BatchedProbes(len(masks), num_neurons, num_labels,
                                               mlp1(hidden_dim=self.cross_check_hidden_dim), input_mask=masks)}
        module = NeuronProbes(groups, self.lr, patience=self.patience, min_delta=self.min_delta)
        fit(module, words.datamodule, self.epochs, device)
        results: dict[str, Any] = {}
        for group, probes in groups.items():
            scores = np.array(accuracies(probes, *test)).reshape(len(names), len(ks))
            epochs = module.best_epochs[group].view(len(names), len(ks))
            results[group] = {name: scores[i].tolist() for i, name in enumerate(names)}
            results[group]["best_epochs"] = {name: epochs[i].tolist() for i, name in enumerate(names)}
            results[group]["epochs_run"] = module.epochs_run
        return results

    def sparse(self, data: Mapping[str, tuple[Tensor, Tensor]], labels: list[str],
               evidence: neurons.Evidence) -> dict[str, Any]:
        """Gurnee et al.'s k-sparse probes of each label, candidates by the label's probeless score."""
        scores = neurons.label_mean_differences(evidence.class_means)
        orders = {label: neurons.descending(np.nan_to_num(scores[c], nan=-np.inf)) for c, label in enumerate(labels)}
        targets = {label: tuple(data[split][1] == c for split in SPLITS) for c, label in enumerate(labels)}
        sparse_data = neurons.SparseData({split: data[split][0] for split in SPLITS}, targets)
        return {"k": self.sparse_k, "candidates": self.sparse_candidates,
                "labels": neurons.sparse_probes(sparse_data, orders, self.sparse_k, self.sparse_candidates)}

    def top_neurons(self, evidence: neurons.Evidence, labels: list[str]) -> dict[str, dict[str, Any]]:
        """{label: {ranking: {"neurons", "scores"}}}: each label's `per_label_top` neurons under every ranking with
        a per-label view (a label absent from the training split has none)."""
        top: dict[str, dict[str, Any]] = {label: {} for label in labels}
        for name, ranking in self.rankings.items():
            scores = ranking.label_scores(evidence)
            for c, label in enumerate(labels):
                if scores is not None and not np.isnan(scores[c]).any():
                    chosen = neurons.descending(scores[c])[: self.per_label_top]
                    top[label][name] = {"neurons": chosen.tolist(), "scores": scores[c][chosen].tolist()}
        return top

    def metrics(self, results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """Step 0: the full probe's accuracies and each ranking's k to 95%; step k: every curve at k."""
        headline = {f"probe/{key}": value for key, value in results["probe"].items()}
        headline |= {f"k_to_95/{group}/{name}": k for group, by_name in results["k_to_95"].items()
                     for name, k in by_name.items()}
        curves = neurons_report.curves(results)
        return [(0, headline), *((k, {name: values[i] for name, values in curves.items()})
                                 for i, k in enumerate(results["ks"]))]


def chosen_rankings(rankings: Mapping[str, Mapping[str, Any]], ranking: str | Sequence[str], seed: int
                    ) -> dict[str, neurons.NeuronRanking]:
    """The rankings of `analysis.ranking` (a name or a list of names of `analysis.rankings`), built, then the random
    control (drawn from `seed`, the run's, unless the random ranking's own `seed` is set)."""
    names = [ranking] if isinstance(ranking, str) else list(ranking)
    known = [name for name in rankings if name != CONTROL]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise ConfigError(f"{setting('ranking')}={names}: {', '.join(map(str, unknown)) or 'no ranking'} is no "
                          f"ranking of {setting('rankings')} (the random control always runs). Fix: "
                          f"{setting('ranking')}=[{','.join(known)}] or one of {', '.join(known)}")
    built = {}
    for name in [*dict.fromkeys(names), CONTROL]:
        node = dict(rankings[name])
        seeded = {"seed": seed} if name == CONTROL and "seed" not in node else {}
        built[name] = build(OmegaConf.create(node), f"analysis.rankings.{name}", **seeded)
        built[name].name = name
    return built


def sparse_k_list(values: Sequence[int]) -> list[int]:
    """The analysis's `sparse_k`: increasing neuron counts >= 1."""
    name = setting("sparse_k")
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ConfigError(f"{name}={values!r} is not a list of neuron counts. Fix: {name}=[1,2,4,8,16]")
    ks = [require_int(name, value, minimum=1) for value in values]
    if not ks or ks != sorted(set(ks)):
        raise ConfigError(f"{name}={ks} must be increasing neuron counts. Fix: {name}=[1,2,4,8,16]")
    return ks


def majority(train_labels: Tensor, test_labels: Tensor, labels: list[str]) -> dict[str, Any]:
    """The most frequent training label (the lowest index among ties) and its share of the test words: the accuracy
    that needs no neuron."""
    top, rates = majority_rates(train_labels, {"test": test_labels})
    return {"label": labels[top], "test_accuracy": rates["test"]}


def split_tensors(split: Any) -> tuple[Tensor, Tensor]:
    """(features (N, D) float32, labels (N,) int64) of a datamodule split, every example."""
    batch = split[torch.arange(len(split))]
    return batch["features"].float(), batch["label"]
