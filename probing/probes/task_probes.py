"""What probe.py does with each kind of task: the one probe pipeline (`probing.tasks.probe`) builds the object that
probe.py's config holds for the task (`probing`, conf/probings/<task>.yaml) and asks it for each step.

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L

from probing.data.settings import require_bool, require_int
from probing.data.splits import SEEN
from probing.data.trees import read_trees
from probing.data.word_tasks import read_word_task
from probing.erasure import applied
from probing.erasure.file import ERASER_FILE
from probing.erasure.setup import ErasureSetup
from probing.errors import ConfigError, setting, settings_named, settings_under
from probing.probes import erased_features
from probing.probes.bits.mdl import DEFAULT_FRACTIONS, online_code
from probing.probes.bits.parts import check_conditioning, check_online_code
from probing.probes.callbacks import (
    KeepBestWeights,
    best_epochs,
    best_weights_keeper,
    control_keeper,
    training_warnings,
)
from probing.probes.components.families import ProbeFamily
from probing.probes.controls import NO_CONTROL_TASK, ControlPart, ControlTask
from probing.probes.probe_module import ProbeModule
from probing.probes.representations import ProbeInputs, features_about
from probing.probes.saved import (
    PROBES_FILE,
    SavedProbes,
    find_reusable,
    load_probes,
    module_of,
    probe_files,
    reused_summary,
    save_probes,
    storage_dtype,
)
from probing.probes.trees.data import TreeDataModule, tree_split_summary
from probing.probes.trees.results import linear_baseline_scores, tree_examples
from probing.probes.trees.structural import structural_map
from probing.results.kinds import SClassProbeResults, TreeProbeResults, WordProbeResults
from probing.vocabulary import SCLASS_TASK

log = logging.getLogger(__name__)


class TaskProbing:
    """What every task's probing is built with: from its config, `module` (the probe module's class, partial: the
    contract's values come from the data); from probe.py, the task's `name` and data `source`, the run's `seed`,
    `erase` (a concept erased from the features first, `probing.erasure.applied`; not for trees) and the probe's
    settings (conf/probe/): `family` (the built probe family, `probe.module`), `mix` (the scalar mix's options),
    `control` (the control task), `mdl` and `mdl_fractions` (the online code, built here: `online_code`, or None),
    `batch_size`, `level`, `reuse` (saved probes, the s-class task's), `pair_product` (a word-pair task's) and
    `condition_on` (the representation the probes are conditioned on, a word task's only), `eval_on` (other datasets
    whose test splits the probe is scored on, a statement task's)."""

    CLOSED_FORM = False  # whether the task takes a family fitted in closed form (mass-mean): statement tasks only
    SCORES_OTHER_DATA = False  # whether the task scores its probe on other datasets (eval_on): statement tasks only

    def __init__(self, name: str, source: Any, module: Callable[..., ProbeModule] | None, seed: int,
                 family: ProbeFamily | None = None, mix: Mapping[str, Any] | None = None,
                 control: ControlTask | None = None, mdl: bool = False,
                 mdl_fractions: Sequence[float] | None = DEFAULT_FRACTIONS, batch_size: int = 256,
                 level: str = "context", reuse: str | None = None, pair_product: bool = False,
                 erase: ErasureSetup | None = None, condition_on: Any = None, eval_on: Sequence[str] | None = None):
        self.name, self.source, self.module, self.family = str(name), source, module, family
        self.eval_on = tuple(str(other) for other in eval_on or ())
        if self.eval_on and not self.SCORES_OTHER_DATA:
            raise ConfigError(f"{setting('eval_on')} scores a probe on the test split of other datasets, and "
                              f"task={name} has one dataset. Fix: {setting('eval_on')}=[], or task=truth")
        self.mix = dict(mix or {})
        self.erase, self.condition_on = erase, condition_on
        self.erasure: applied.Erasure | None = None  # what `erase` did, once the inputs are built
        self.control = control or NO_CONTROL_TASK
        with settings_under("control"):
            self.control.check_level(level)
        self.seed = require_int(setting("seed"), seed)
        self.online_code = online_code(mdl, mdl_fractions, self.seed, level, reuse)
        self.batch_size = require_int(setting("batch_size"), batch_size, minimum=1)
        self.level, self.reuse = level, reuse
        self.pair_product = require_bool(setting("pair_product"), pair_product)
        if family is not None and family.closed_form and not self.CLOSED_FORM:
            raise ConfigError(f"probe={family.name} is fitted in closed form on one vector per text, and task={name} "
                              "trains its probes by gradient steps. Fix: probe=linear, or task=truth")

    def load(self) -> None:
        """Read what can be read before the model loads (a task the data cannot serve is refused first)."""

    def inputs(self, representation: Any, store_settings: Mapping[str, Any]) -> ProbeInputs:
        raise NotImplementedError

    def new_module(self, inputs: ProbeInputs) -> ProbeModule:
        """Untrained probes for `inputs`: the task's classifier built with the keyword contract."""
        datamodule = inputs.datamodule
        train_examples = len(datamodule.splits["train"])
        conditioning_dim = inputs.conditioning_dim
        return self.module(labels=list(inputs.classes), input_dim=datamodule.feature_dim - (conditioning_dim or 0),
                           num_layers=datamodule.num_layers, level=inputs.level, control=self.control.seed is not None,
                           mdl_block_ends=self.online_code.block_ends(train_examples) if self.online_code else None,
                           conditioning_dim=conditioning_dim, family=self.family, mix=self.mix)

    def build_module(self, inputs: ProbeInputs) -> ProbeModule:
        """The probe module this run scores: new probes (or saved ones, for a task that reuses them)."""
        return self.new_module(inputs)

    def keepers(self, inputs: ProbeInputs) -> list[L.Callback]:
        """The control head keeps the weights of its own best dev epoch (or the real head's, with a seen split)."""
        return [] if self.control.seed is None else [control_keeper(SEEN in inputs.datamodule.splits)]

    def fit(self, trainer: L.Trainer, module: ProbeModule, inputs: ProbeInputs, run_dir: Path) -> dict[str, Any]:
        """Train the probes, each head keeping its best-dev weights; the best epochs and the fit's warnings. With an
        erasure, the fitted eraser is saved beside the results (one process writes it)."""
        trainer.fit(module, datamodule=inputs.datamodule)
        warnings = training_warnings(best_weights_keeper(trainer.callbacks).best_score, trainer.current_epoch)
        for warning in warnings:
            log.warning("%s", warning)
        if self.erasure is not None and trainer.is_global_zero:
            self.erasure.save(run_dir / ERASER_FILE)
        return {**best_epochs(trainer.callbacks), "warnings": warnings}

    def results(self, module: ProbeModule, inputs: ProbeInputs) -> dict[str, Any]:
        """What this task's results.json records beyond every run's keys (and the erasure's record)."""
        return {} if self.erasure is None else {"erasure": self.erasure.record}

    def erase_concept(self, inputs: ProbeInputs, concept: applied.ConceptSplits, labels: list[str],
                      concept_name: str, apply: Callable[[Any], None]) -> None:
        """Fit the eraser of `erase` on the concept's training words (`probing.erasure.applied`), `apply` it
        to the inputs' splits, and measure its guardedness on the concept's words."""
        fitted, control, record = applied.fit_eraser(self.erase, concept, len(labels), inputs.features,
                                                             concept_name)
        apply(fitted)
        record["guardedness"] = erased_features.guardedness_report(fitted, control, concept, labels, self.seed,
                                                                   self.erase.fresh_probe_epochs)
        log.info("%s", applied.describe(record))
        if not self.family.linear and fitted.method != "random":
            log.warning("probe family %s after %s: the erasure guards against linear probes only, so this probe may "
                        "still read %s (the guardedness report's MLP-1: test accuracy %.3f). probe=linear tests the "
                        "erasure itself", self.family.name, fitted.method, concept_name,
                        record["guardedness"]["fresh_probes"]["mlp1_erased"].get("test", float("nan")))
        self.erasure = applied.Erasure(fitted, record, inputs.features, labels)


class SClassProbing(TaskProbing):
    """The s-class task (see the module docstring). `level` (probe.level): context or type; `reuse` (probe.reuse): a
    probe run folder (or a sweep of them) whose saved probes are scored instead of training new ones, read and
    checked here, before any extraction."""

    RESULTS_KIND = SClassProbeResults.KIND  # the kind of its results.json

    def __init__(self, **shared: Any):
        super().__init__(**shared)
        refuse_conditioning(self.name, self.condition_on)
        refuse_pair_product(self.name, self.pair_product)
        self.saved: list[SavedProbes] = [load_probes(path) for path in probe_files(self.reuse)] if self.reuse else []

    def inputs(self, representation: Any, store_settings: Mapping[str, Any]) -> ProbeInputs:
        if self.erase is not None:
            erased_features.check_erasable(getattr(representation, "store_layer", None))
            applied.check_own_concept(self.erase, self.name)
        inputs = representation.inputs(self.source, store_settings, self.batch_size, self.control, self.online_code)
        if self.erase is not None:
            splits = inputs.datamodule.splits
            concept = {name: (split.tensors["features"].float(), split.tensors["label"])
                       for name, split in splits.items()}
            self.erase_concept(inputs, concept, list(inputs.classes), self.name,
                               lambda fitted: applied.erase_tensor_splits(splits, fitted, self.erase.device))
        return inputs

    def build_module(self, inputs: ProbeInputs) -> ProbeModule:
        """New probes; with `reuse`, the saved probes that fit these features (their control head too when this run
        draws the same control classes, same seed)."""
        if not self.reuse:
            return self.new_module(inputs)
        saved = find_reusable(self.reuse, inputs.features, seed=self.seed, candidates=self.saved)
        same_controls = self.control.seed is not None and saved.about.get("control_seed") == self.control.seed
        module = module_of(saved, self.module, saved.has_control and same_controls)
        log.info("Scoring the probes saved in %s (trained on %s) on %s, without training", saved.path,
                 saved.about["model_name_or_path"], inputs.features["model_name_or_path"])
        self.reused = saved
        return module

    def keepers(self, inputs: ProbeInputs) -> list[L.Callback]:
        return [] if self.reuse else super().keepers(inputs)

    def fit(self, trainer: L.Trainer, module: ProbeModule, inputs: ProbeInputs, run_dir: Path) -> dict[str, Any]:
        """Train and save the probes' best-dev weights in `run_dir` with what they were trained on (the MDL prefix
        probes are not saved: only the codelength needs them); saved probes are scored as they are."""
        if self.reuse:
            module.bits_selection = "none: saved probes, scored as they were saved"
            if self.erasure is not None and trainer.is_global_zero:
                self.erasure.save(run_dir / ERASER_FILE)
            return {"best_epoch": None, "reused_probes": reused_summary(self.reused), "warnings": []}
        outcome = super().fit(trainer, module, inputs, run_dir)
        path = run_dir / PROBES_FILE
        if trainer.is_global_zero:  # every process holds the same weights; one writes them
            about = {**inputs.features, **{key: outcome[key] for key in outcome if key.endswith("best_epoch")},
                     "seed": self.seed, "best_dev_micro_f1": best_weights_keeper(trainer.callbacks).best_score,
                     "module": module.settings()}
            save_probes(module, path, about, dtype=storage_dtype(str(trainer.precision)))
        return {**outcome, "probes_file": str(path)}

    def results(self, module: ProbeModule, inputs: ProbeInputs) -> dict[str, Any]:
        return {"classes": list(inputs.classes), **super().results(module, inputs)}


class WordProbing(TaskProbing):
    """A word or word-pair task (see the module docstring). `data_name` names the data in errors; `pair_product`
    (probe.pair_product): a pair's input is [a; b; a * b] instead of [a; b]. A word task has no type level, no saved
    probes and no seen split (its dev and test already hold words seen in training): those settings are refused."""

    RESULTS_KIND = WordProbeResults.KIND  # the kind of its results.json

    def __init__(self, data_name: str, **shared: Any):
        super().__init__(**shared)
        refuse_settings_of_sclass(self.name, self.level, self.reuse, self.control)
        check_conditioning(self.condition_on, self.erase)
        self.data_name = str(data_name)
        self.data = None

    def load(self) -> None:
        self.data = read_word_task(self.source, self.data_name)
        if not self.data.pair:
            refuse_pair_product(self.name, self.pair_product)

    def inputs(self, representation: Any, store_settings: Mapping[str, Any]) -> ProbeInputs:
        if self.data is None:
            self.load()
        if self.erase is None:
            return self.word_inputs(representation, store_settings)
        return self.erased_inputs(representation, store_settings)

    def word_inputs(self, representation: Any, store_settings: Mapping[str, Any]) -> ProbeInputs:
        return representation.word_inputs(self.data, store_settings, self.batch_size, self.control,
                                          pair_product=self.pair_product, online_code=self.online_code)

    def erased_inputs(self, representation: Any, store_settings: Mapping[str, Any]) -> ProbeInputs:
        """The task's inputs with the concept of `erase` erased from every split (`probing.erasure.applied`):
        the concept's stores filled with the same featurizer first, the eraser fitted on its training words."""
        erased_features.check_erasable(representation.store_layer)
        concept = applied.concept_data(self.erase, self.name, self.source, self.data)
        if concept is self.data:  # the task's own labels: its examples' words, as read for the probe
            inputs = self.word_inputs(representation, store_settings)
            concept_words = erased_features.example_words(inputs.datamodule)
        else:
            concept_stores, _ = representation.word_stores(concept, store_settings, keep_featurizer=True)
            inputs = self.word_inputs(representation, store_settings)
            concept_words = erased_features.concept_splits(concept_stores, concept, representation.store_layer,
                                                           representation.expected_layers)
        self.erase_concept(inputs, concept_words, list(concept.labels), concept.name,
                           lambda fitted: applied.erase_splits(inputs.datamodule, fitted, self.erase.device))
        return inputs

    def results(self, module: ProbeModule, inputs: ProbeInputs) -> dict[str, Any]:
        return {"pair": bool(self.data.pair), "pair_product": self.pair_product if self.data.pair else None,
                "labels": list(inputs.classes), **super().results(module, inputs)}


class TreeProbing(TaskProbing):
    """A tree task (task=tree_distance, tree_depth; Hewitt & Manning 2019): the dependency trees of the task's
    sentences (`probing.data.trees`), read from the every-word stores a sentence at a time; the structural probe of
    `kind` ("distance" or "depth", `probing.probes.trees.probe`). Refused as for a word task: the type level, saved
    probes, a seen split; and what a structural probe does not honour (another family, dropout, the online code).
    Its results add the paper's LINEAR baseline (each word attached to the next; depth = position) scored by the same
    metrics on the same sentences, B's rank, and a few test sentences' gold and predicted trees (the report draws
    them)."""

    RESULTS_KIND = TreeProbeResults.KIND  # the kind of its results.json

    def __init__(self, kind: str, **shared: Any):
        super().__init__(**shared)
        refuse_settings_of_sclass(self.name, self.level, self.reuse, self.control)
        refuse_pair_product(self.name, self.pair_product)
        refuse_erasure(self.name, self.erase)
        refuse_conditioning(self.name, self.condition_on)
        self.network = structural_map(self.family, kind)
        check_online_code(self.online_code, labels=False)
        self.kind, self.data = kind, None

    def new_module(self, inputs: ProbeInputs) -> ProbeModule:
        """An untrained structural probe for `inputs` (no labels: no online code, conditioning or bits)."""
        datamodule = inputs.datamodule
        return self.module(family=self.network, input_dim=datamodule.feature_dim, num_layers=datamodule.num_layers,
                           level=inputs.level, control=self.control.seed is not None, mix=self.mix)

    def load(self) -> None:
        with settings_named({"data.source.paths": "data.data_dir"}):  # a tree task's files (conf/task/tree_*.yaml)
            self.data = read_trees(self.source)

    def inputs(self, representation: Any, store_settings: Mapping[str, Any]) -> ProbeInputs:
        if self.data is None:
            self.load()
        stores, described = representation.word_stores(self.data, store_settings)
        datamodule = TreeDataModule(stores, self.data, representation.store_layer, self.kind, self.batch_size,
                                    self.control.seed, representation.expected_layers)
        datamodule.setup()
        about = {**representation.about_stores(stores), "data_skips": self.data.skips.as_dict(),
                 "data_summary": {split: tree_split_summary(self.data.splits[split], datamodule.dropped[split])
                                  for split in datamodule.splits}}
        features = features_about(described, representation.level, [], datamodule, about, self.control,
                                  self.data.name)
        return ProbeInputs(datamodule, [], about, representation.level, features)

    def keepers(self, inputs: ProbeInputs) -> list[L.Callback]:
        """The control probe keeps the weights of its own least dev loss."""
        if self.control.seed is None:
            return []
        return [KeepBestWeights(monitor="dev/control_loss", mode="min", submodule=ControlPart.HEAD)]

    def results(self, module: ProbeModule, inputs: ProbeInputs) -> dict[str, Any]:
        datamodule = inputs.datamodule
        return {"structure": self.kind, "rank": module.probes.rank,
                "linear_baseline": {split: linear_baseline_scores(datamodule.splits[split], self.kind)
                                    for split in ("dev", "test")},
                "examples": tree_examples(module, datamodule.splits["test"], self.data.splits["test"].sentences,
                                          self.kind)}


def refuse_settings_of_sclass(task: str, level: str, reuse: str | None, control: ControlTask) -> None:
    """What only the s-class task has: type-level probing, saved probes, a seen split (a word or tree task's dev and
    test already hold words seen in training)."""
    if reuse:
        raise ConfigError(f"{setting('reuse')} scores saved s-class probes; task={task} trains its own. Fix: "
                          f"{setting('reuse')}=null")
    if level != "context":
        raise ConfigError(f"{setting('level')}={level} is a setting of the s-class task (type-level probing); "
                          f"task={task} probes the words of whole sentences in context. "
                          f"Fix: {setting('level')}=context")
    with settings_under("control"):
        control.refuse_seen_split(task)


def refuse_erasure(task: str, erase: ErasureSetup | None) -> None:
    """Concept erasure is fitted on, and applied to, the vectors of words (a word task's, the s-class task's)."""
    if erase is not None:
        raise ConfigError(f"erase= erases a concept from the vectors of labelled words, and task={task} has trees, "
                          "not labels. Fix: erase=none, or task=upos (xpos, deprel, feats, ner, jsonl, sclass)")


def refuse_pair_product(task: str, pair_product: Any) -> None:
    """`pair_product` joins the two words of a word-pair task's examples: a task without pairs refuses it."""
    if require_bool(setting("pair_product"), pair_product):
        raise ConfigError(f"{setting('pair_product')}=true multiplies the two words of a pair, and task={task} has no "
                          f"word pairs. Fix: {setting('pair_product')}=false, or a word-pair task (task=deprel)")


def refuse_conditioning(task: str, condition_on: Any) -> None:
    """Conditional probing compares the cross-entropies of multi-class probes on X and on [X; R]: a word task's."""
    if condition_on is not None:
        raise ConfigError(f"{setting('condition_on')}={condition_on} conditions a word task's probe on another "
                          f"representation; task={task} is not a word task. Fix: {setting('condition_on')}=null, or "
                          "task=upos (xpos, deprel, feats, ner, pos, supersense, jsonl)")


def check_probing_task(task_name: str, probing: Any) -> None:
    """A task that has no probing (an empty conf/probings/<task>.yaml) is a fine-tuning task of train.py."""
    if not probing:
        raise ConfigError(f"task={task_name} classifies whole sentences (a fine-tuning task of train.py); probe.py "
                          f"probes words. Fix: task={SCLASS_TASK} (the default), upos, xpos, deprel, feats, ner, pos, "
                          "supersense or jsonl")
