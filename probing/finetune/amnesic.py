"""analyze.py analysis=amnesic: amnesic probing (Elazar et al. 2021). A concept (UPOS, XPOS, DEPREL, NER types) is
erased from the analysed model's own hidden state ℓ inside its forward pass (probing.erasure), the layers above run
on the erased states, and what the model's output loses is measured against no erasure and against erasing as many
random directions: a train.py export on its own task's metric, a masked LM on masked-word accuracy and KL divergence
(probing.finetune.amnesic_scores). docs/erasure.md, "Amnesic probing", records the choices where the paper leaves
room.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from omegaconf import OmegaConf
from safetensors.torch import load_file
from torch import Tensor
from transformers import AutoModelForMaskedLM, PreTrainedModel, PreTrainedTokenizerFast

from probing.analysis import Analysis, AnalysisInputs, ModelSettings, analysis_device
from probing.config import build
from probing.data.concepts import CONCEPTS, concept_task, read_concept
from probing.data.sentences import texts_of
from probing.data.settings import require_int
from probing.data.text import note_data_files
from probing.data.word_tasks import WordTaskSplit
from probing.erasure.fitted import FittedEraser
from probing.erasure.hidden_state import captured_hidden_state, check_hidden_state_module
from probing.erasure.random_control import RandomEraser, random_control
from probing.erasure.setup import UNSET_ERASURE, ErasureSetup
from probing.errors import ConfigError, DataFormatError, setting, settings_as
from probing.features.finetuned import EXPORT_FIX, HEAD_FILE, TASK_FILE, verify_export
from probing.features.hf_models import load_pretrained
from probing.features.layers import resolve_layer
from probing.features.tensor_files import READ_ERRORS
from probing.finetune.amnesic_scores import Condition, masked_lm_scores, task_scores
from probing.finetune.module import FineTuner
from probing.report import amnesic as amnesic_report

log = logging.getLogger(__name__)

# The metric of each fine-tuned task (conf/task/<task>.yaml's task.metric) for an export whose task.json does not
# record it, and the score of each metric that the report puts first (the task's monitor).
TASK_METRICS = {"ner": "entity_f1", "mrpc": "accuracy_f1"}
HEADLINES = {"entity_f1": "f1"}
MASKED_LM = "masked_lm"  # the objective of a model analysed through its masked-LM head


class Amnesic(Analysis):
    """conf/analysis/amnesic.yaml: the concept and eraser of `erase` (conf/erase/, an ErasureSetup; the concept read
    from `concept_paths`: CoNLL-U files for upos, xpos, deprel, None = the bundled EWT sample; the CoNLL-2003 folder
    for ner), the random control once per seed of `control_seeds`, `batch_size` sentences (masked words for an MLM)
    per forward pass of at most `max_length` wordpieces, on `device`."""

    report = amnesic_report
    instead_of_layer = None  # `layer` is the hidden state the concept is erased from

    def __init__(self, name: str, sentences: dict[str, Any], split: str | None, max_sentences: int | None,
                 erase: dict[str, Any] | None, concept_paths: str | Sequence[str] | None, control_seeds: Sequence[int],
                 batch_size: int, max_length: int, device: str):
        super().__init__(name, sentences, split, max_sentences)
        self.setup = erasure_setup(erase)
        # no concept is refused by `check_inputs`: the config builds without one, as conf/erase/ has none
        with settings_as({"concept": "erase.concept", "paths": "concept_paths"}):  # the concept's, as set here
            self.concept_source = None if self.setup.concept is None else concept_task(self.setup.concept,
                                                                                          concept_paths)
        self.control_seeds = control_seed_list(control_seeds)
        self.batch_size = require_int(setting("batch_size"), batch_size, minimum=1)
        self.max_length = require_int(setting("max_length"), max_length, minimum=3)
        self.device = device

    def check_inputs(self, inputs: AnalysisInputs) -> None:
        """A concept and a layer are required, and the model must be the trained one."""
        if self.concept_source is None:
            concept = setting("erase.concept")
            raise ConfigError(f"{concept}=null: analysis=amnesic has no task of its own to erase. Fix: "
                              f"{concept}=upos (one of {', '.join(CONCEPTS)})")
        if inputs.layer is None:
            raise ConfigError("layer=null: analysis=amnesic erases the concept from one hidden state. Fix: layer=N "
                              "(0 = the embedding output, 1..L the transformer layers, -1 the top one), e.g. layer=3")
        if inputs.model.random_init:
            random_init = setting("model.random_init")  # the job's model, which the analysis is given
            raise ConfigError(f"{random_init}=true: amnesic probing measures what a trained model's output loses, "
                              f"and a re-initialised encoder has lost everything already. Fix: {random_init}=false")

    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        device = analysis_device(self.device)
        model = load_analysed(inputs.model, device)
        layer = resolve_layer(inputs.layer, model.num_layers, model=inputs.model.name)
        data, split = self.scored_data(model)  # refused here, before the eraser is fitted
        concept = read_concept(self.concept_source, self.setup.concept)
        train, dev = (concept_vectors(model, concept.splits[part], layer, self.batch_size, self.max_length, device,
                                      inputs.model.name) for part in ("train", "dev"))
        fitted, controls = self.fit_erasers(train, dev, len(concept.labels), device)
        conditions = [Condition("none"), Condition("erased", fitted),
                      *(Condition("random", control, seed) for seed, control in zip(self.control_seeds, controls))]
        log.info("amnesic: %s erased at layer %d by %s (rank %d), random controls of rank %d, seeds %s",
                 concept.name, layer, fitted.method, fitted.rank, controls[0].rank, self.control_seeds)
        if fitted.rank == 0:
            log.warning("the %s eraser removes nothing from layer %d (rank 0): the erased model is the model "
                        "itself (results.json: eraser.about says why)", fitted.method, layer)
        by_condition, scored = self.score(model, data, split, layer, conditions, device)
        results = {
            **inputs.model.described(), "weights_sha256": model.weights_sha256, "objective": model.objective,
            "layer": layer, "concept": concept.name, "concept_labels": concept.labels,
            "concept_words": {"train": len(train[1]), "dev": len(dev[1])}, "eraser": eraser_record(fitted),
            "controls": {"method": "random", "rank": controls[0].rank, "seeds": self.control_seeds},
            **scored, "scores": summarized(by_condition, conditions),
        }
        run_dir.mkdir(parents=True, exist_ok=True)
        self.report.plot_scores([results], run_dir / self.report.FIGURE)
        log.info("amnesic probing of %s, layer %d, %s erased: %s", model.objective, layer, concept.name,
                 self.report.scores_text(results))
        return results

    def scored_data(self, model: AnalysedModel) -> tuple[Any, str]:
        """The data of `analysis.sentences` (a fine-tuned model's: its task's) and the split scored: `analysis.split`,
        or when unset the test split where the data has one, else dev (the bundled samples have no test split)."""
        # refused before the data is loaded: another task's data may not even be readable here (GLUE offline)
        if model.finetuner is not None and self.sentences.name != model.objective:
            raise ConfigError(f"analysis.sentences reads {self.sentences.name} data, but the model was fine-tuned on "
                              f"{model.objective} (its task.json). Fix: analysis/sentences={model.objective} (its "
                              f"data), as train.py task={model.objective} read it")
        data = self.load_sentences()
        if self.split is None:
            return data, "test" if data.splits.get("test") else "dev"
        if self.split not in data.splits:
            raise ConfigError(f"{setting('split')}={self.split}: the {data.name} data has the splits "
                              f"{', '.join(data.splits)}. Fix: {setting('split')}=null (test where there is one, else "
                              "dev)")
        return data, self.split

    def fit_erasers(self, train: tuple[Tensor, Tensor], dev: tuple[Tensor, Tensor], num_classes: int,
                    device: torch.device) -> tuple[FittedEraser, list[FittedEraser]]:
        """The concept's eraser, fitted on the training words (dev held out for INLP), and one random control of
        its rank (at least 1, as probe.py's control) per seed of `control_seeds`, fitted on `erase.device` and
        returned on `device`."""
        train, dev = (tuple(tensor.to(self.setup.device) for tensor in split) for split in (train, dev))
        fitted = self.setup.eraser.fit(*train, num_classes, held_out=dev)
        controls = [random_control(fitted, seed).fit(*train, num_classes).to(device)
                    for seed in self.control_seeds]
        return fitted.to(device), controls

    def score(self, model: AnalysedModel, data: Any, split: str, layer: int, conditions: list[Condition],
              device: torch.device) -> tuple[list[dict[str, float]], dict[str, Any]]:
        """The scores of each condition on `split` of `data`, and what was scored: the metric, the score the
        report puts first (`headline`), the data and its size."""
        about: dict[str, Any] = {"data": f"{data.name} {split}", "split": split}
        if model.finetuner is not None:
            by_condition, counts = task_scores(model.finetuner, data, split, self.max_sentences, layer, conditions,
                                               self.batch_size, self.max_length, device)
            metric = model.finetuner.hparams.metric
            return by_condition, {"metric": metric, "headline": HEADLINES.get(metric, "accuracy"), **about, **counts}
        texts = texts_of(data, split, self.max_sentences)
        by_condition, counts = masked_lm_scores(model.masked_lm, model.encoder, model.tokenizer, texts, layer,
                                                conditions, self.batch_size, self.max_length, device)
        return by_condition, {"metric": MASKED_LM, "headline": "accuracy", **about,
                              "masking": "each word's first wordpiece in turn, one input per word", **counts}

    def metrics(self, results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """Every score of every condition (none, erased, random_mean, random_std), at the step of the layer."""
        scores = results["scores"]
        flat = {f"{condition}/{metric}": value for condition in ("none", "erased") for metric, value in
                scores[condition].items()}
        for statistic in ("mean", "std"):
            flat |= {f"random_{statistic}/{metric}": value for metric, value in scores["random"][statistic].items()}
        return [(results["layer"], flat)]


def erasure_setup(erase: dict[str, Any] | None) -> ErasureSetup:
    """The `erase` node built, refused where amnesic probing cannot use it."""
    setup = None if erase is None else build(OmegaConf.create(erase), "erase")
    if setup is None:
        raise ConfigError("erase=none: analysis=amnesic erases a concept. Fix: erase=leace (or inlp, mean_projection) "
                          f"{setting('erase.concept')}=upos")
    if setup.path is not None:
        raise ConfigError(f"{setting('erase.path')}={setup.path}: analysis=amnesic fits its eraser on the analysed "
                          f"model's own hidden state. Fix: {setting('erase.path')}=null")
    if isinstance(setup.eraser, RandomEraser):
        raise ConfigError("erase=random: random directions are the control that analysis=amnesic measures beside "
                          "every erasure (analysis.control_seeds). Fix: erase=leace, inlp or mean_projection")
    for key, instead in PROBE_ONLY_ERASE_SETTINGS.items():
        if getattr(setup, key) != UNSET_ERASURE[key]:
            raise ConfigError(f"erase.{key}={getattr(setup, key)} is a setting of probe.py's erasure, which "
                              f"analysis=amnesic does not read ({instead}). Fix: leave it out")
    return setup


# The settings of `erase` that only probe.py reads (conf/probe.yaml: analyze.py's config does not hold them, so only
# `+erase.<key>=` adds them), and what the amnesic analysis has instead.
PROBE_ONLY_ERASE_SETTINGS = {"control_seed": "its random controls are analysis.control_seeds",
                             "fresh_probe_epochs": "it trains no fresh probe of the concept"}


def control_seed_list(seeds: Sequence[int]) -> list[int]:
    if isinstance(seeds, (str, int)) or not seeds:
        raise ConfigError(f"{setting('control_seeds')}={seeds!r} is not a list of seeds. Fix: "
                          f"{setting('control_seeds')}=[0,1,2]")
    listed = [require_int(setting("control_seeds"), seed) for seed in seeds]
    if len(set(listed)) < len(listed):
        raise ConfigError(f"{setting('control_seeds')}={listed} repeats a seed. Fix: distinct seeds, e.g. [0,1,2]")
    return listed


@dataclass
class AnalysedModel:
    """The model under analysis: its base encoder (where the hidden state is erased), its tokenizer, and how its
    output is scored (`objective`: its fine-tuning task, or MASKED_LM)."""

    encoder: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    weights_sha256: str
    objective: str
    finetuner: FineTuner | None = None
    masked_lm: PreTrainedModel | None = None

    @property
    def num_layers(self) -> int:
        return self.encoder.config.num_hidden_layers + 1


def load_analysed(model: ModelSettings, device: torch.device) -> AnalysedModel:
    """A model exported by train.py (task.json beside its weights) with its task head, or a masked LM."""
    folder = Path(str(model.name_or_path)).expanduser()
    if (folder / TASK_FILE).is_file():
        about = read_export(folder)
        metric = about.get("metric") or TASK_METRICS.get(about["task"], "accuracy")
        finetuner = FineTuner(str(folder), about["labels"], about["kind"], metric=metric, revision=model.revision)
        load_head(finetuner, folder)
        finetuner.to(device).eval()
        return AnalysedModel(finetuner.encoder, finetuner.tokenizer, finetuner.info.weights_sha256, about["task"],
                             finetuner=finetuner)
    # Hugging Face's loading reports are silenced: the encoder is loaded without the head (whose keys it reports as
    # unexpected), and a head missing from the weights is refused here in one line.
    with transformers_errors_only():
        _, tokenizer, info = load_pretrained(model.name_or_path, model.revision)
        masked_lm, loading = AutoModelForMaskedLM.from_pretrained(info.model_path, revision=model.revision,
                                                                  output_hidden_states=True, output_loading_info=True)
    prefix = masked_lm.base_model_prefix
    untrained = sorted(key for key in loading["missing_keys"] if not key.startswith(f"{prefix}."))
    if untrained or tokenizer.mask_token_id is None:
        lacking = f"its weights lack {', '.join(untrained[:2])}" if untrained else "its tokenizer has no mask token"
        raise ConfigError(f"model {model.name} has no masked-LM head ({lacking}), and is not a model exported by "
                          f"train.py (no task.json). Fix: {setting('model.name_or_path')}=<train run>/model (a model "
                          "fine-tuned by train.py, e.g. from the packaged MiniLM), or a masked LM such as "
                          "bert-base-uncased")
    masked_lm.float().requires_grad_(False).eval().to(device)
    return AnalysedModel(masked_lm.base_model, tokenizer, info.weights_sha256, MASKED_LM, masked_lm=masked_lm)


def read_export(folder: Path) -> dict[str, Any]:
    """The task.json of a folder exported by train.py, checked (it and the head against the export's hashes, then
    what it holds), with the head's weights beside it. Loading the encoder checks the export's other files."""
    verify_export(folder, [TASK_FILE, HEAD_FILE])
    task_file = folder / TASK_FILE
    note_data_files([task_file])
    try:
        about = json.loads(task_file.read_text(encoding="utf-8"))
        missing = [key for key in ("task", "kind", "labels") if key not in about]
    except (OSError, ValueError, TypeError) as error:
        raise DataFormatError(task_file, None, f"not readable as train.py's task.json ({error})",
                              EXPORT_FIX) from error
    if missing:
        raise DataFormatError(task_file, None, f"it has no {', '.join(missing)}", EXPORT_FIX)
    labels = about["labels"]
    if not isinstance(labels, list) or not labels or not all(isinstance(label, str) for label in labels):
        raise DataFormatError(task_file, None, f"its labels ({labels!r}) are not a list of names", EXPORT_FIX)
    if not (folder / HEAD_FILE).is_file():
        raise DataFormatError(folder, None, f"it has {TASK_FILE} but no {HEAD_FILE} (the task head)", EXPORT_FIX)
    return about


def load_head(finetuner: FineTuner, folder: Path) -> None:
    """The exported head's weights into `finetuner`, whose head fits the encoder and the labels of task.json; a file
    that does not read, or holds weights of other names or shapes, is one DataFormatError."""
    path = folder / HEAD_FILE
    try:
        weights = load_file(path)
    except READ_ERRORS as error:
        raise DataFormatError(path, None, f"not a readable safetensors file ({error})", EXPORT_FIX) from error
    expected = {name: tuple(tensor.shape) for name, tensor in finetuner.head.state_dict().items()}
    found = {name: tuple(tensor.shape) for name, tensor in weights.items()}
    if found != expected:
        raise DataFormatError(path, None, f"its weights ({shapes_text(found)}) do not fit a head for the "
                              f"{len(finetuner.labels)} labels of {TASK_FILE} on {finetuner.info.hidden_size}-"
                              f"dimensional vectors ({shapes_text(expected)})", EXPORT_FIX)
    finetuner.head.load_state_dict(weights)


def shapes_text(shapes: dict[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{name} {shape}" for name, shape in sorted(shapes.items())) or "none"


@contextmanager
def transformers_errors_only() -> Iterator[None]:
    """Hugging Face's warnings (such as a loading report) silenced within the block."""
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def concept_vectors(model: AnalysedModel, split: WordTaskSplit, layer: int, batch_size: int, max_length: int,
                    device: torch.device, model_name: str) -> tuple[Tensor, Tensor]:
    """(vectors (N, D) float32 on the CPU, labels (N,)) of the split's examples: hidden state `layer` of the
    analysed model, each example's word (a pair's dependent) the mean of its wordpieces; words cut off by
    `max_length` are left out."""
    words = every_word_vectors(model.encoder, model.tokenizer, split.sentences, layer, batch_size, max_length, device,
                               model_name)
    rows = torch.from_numpy(split.every_word_rows())
    vectors, labels = words[rows], torch.from_numpy(split.label)
    kept = ~vectors.isnan().any(dim=1)
    return vectors[kept], labels[kept]


def every_word_vectors(encoder: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                       sentences: Sequence[Sequence[str]], layer: int, batch_size: int, max_length: int,
                       device: torch.device, model_name: str) -> Tensor:
    """(words, D) float32: the vector at hidden state `layer` of every word of every sentence, in order (all words
    of sentence 0, then of sentence 1, ...), read from the module that the erasure edits; NaN for a word without
    wordpieces or cut off by `max_length`. Sentences are batched by length (less padding), the order kept."""
    limit = min(max_length, getattr(encoder.config, "max_position_embeddings", max_length))
    by_length = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
    vectors: list[Tensor] = [torch.empty(0)] * len(sentences)
    for start in range(0, len(by_length), batch_size):
        chosen = by_length[start:start + batch_size]
        batch = [list(sentences[index]) for index in chosen]
        encoded = tokenizer(batch, is_split_into_words=True, truncation=True, max_length=limit, padding=True,
                            return_tensors="pt").to(device)
        with torch.inference_mode(), captured_hidden_state(encoder, layer) as captured:
            output = encoder(**encoded, output_hidden_states=True)
        if start == 0:
            check_hidden_state_module(encoder, layer, output.hidden_states[layer], captured[0], model_name)
        pooled = mean_of_pieces(captured[0].float().cpu(), [encoded.word_ids(row) for row in range(len(batch))],
                                [len(words) for words in batch])
        for index, words in zip(chosen, pooled.split([len(words) for words in batch])):
            vectors[index] = words
    return torch.cat(vectors) if vectors else torch.empty(0, encoder.config.hidden_size)


def mean_of_pieces(states: Tensor, word_ids: Sequence[Sequence[int | None]], num_words: Sequence[int]) -> Tensor:
    """(sum(num_words), D): the mean of each word's wordpiece vectors, the words of row 0 of `states` (B, T, D)
    first, NaN for a word without any; `word_ids[row]` gives the word of each position (None: no word's)."""
    offsets = [sum(num_words[:row]) for row in range(len(num_words))]
    pieces = [(row, position, offsets[row] + word) for row, words in enumerate(word_ids)
              for position, word in enumerate(words) if word is not None]
    rows, positions, targets = torch.tensor(pieces, dtype=torch.long).reshape(-1, 3).T
    total = sum(num_words)
    sums = states.new_zeros(total, states.shape[-1]).index_add_(0, targets, states[rows, positions])
    return sums / torch.bincount(targets, minlength=total)[:, None]


def eraser_record(fitted: FittedEraser) -> dict[str, Any]:
    """What results.json says of the eraser: its method and rank, INLP's iterations, and how it was fitted."""
    return {"method": fitted.method, "rank": fitted.rank, "iterations": fitted.about.get("iterations"),
            "dropped_dims": list(fitted.dropped_dims), "about": fitted.about}


def summarized(by_condition: list[dict[str, float]], conditions: list[Condition]) -> dict[str, Any]:
    """{"none": scores, "erased": scores, "random": {"per_seed": [{"seed", scores...}], "mean", "std"}}: the
    random controls' mean and sample std over the seeds (std None for a single seed)."""
    out: dict[str, Any] = {}
    per_seed = []
    for condition, scores in zip(conditions, by_condition):
        if condition.name == "random":
            per_seed.append({"seed": condition.seed, **scores})
        else:
            out[condition.name] = scores
    columns = {metric: [row[metric] for row in per_seed] for metric in by_condition[0]}
    out["random"] = {"per_seed": per_seed,
                     "mean": {metric: statistics.fmean(values) for metric, values in columns.items()},
                     "std": {metric: statistics.stdev(values) if len(values) > 1 else None
                             for metric, values in columns.items()}}
    return out
