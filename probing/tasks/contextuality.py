"""analyze.py analysis=contextuality: Ethayarajh 2019 (§3-4) per layer of `model` on `analysis.sentences`.

The sentences' words go to an every-word feature store (probing.features.sentence_store), the measures come from
probing.geometry.contextuality, the table and Figures 1-4 from probing.report.contextuality (also written into the
run folder: contextuality.csv, contextuality.png). `OccurrenceAnalysis`, the occurrences and their store, is shared
with analysis=static_pc.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from probing.data.settings import require_bool, require_int
from probing.errors import ConfigError
from probing.features.finetuned import finetuned_task
from probing.features.provision import store_root
from probing.features.sentence_store import SentenceWordEncoder, extract_occurrences
from probing.features.store import FeatureStore
from probing.geometry import contextuality as measures
from probing.geometry.occurrences import Occurrences, collect_occurrences, text_sentences, word_index
from probing.geometry.sentences import texts_of
from probing.report import contextuality as contextuality_report
from probing.tasks.analysis import Analysis, AnalysisInputs, ModelSettings, analysis_device
from probing.vocabulary import CONTEXTUALITY

log = logging.getLogger(__name__)

ALL_SPLITS = "all"


class OccurrenceAnalysis(Analysis):
    """An analysis of the word occurrences of `analysis.sentences` (split `all`: every split; the first
    `max_sentences`, words lower-cased when `lowercase`) of the words in at least `min_contexts` distinct sentences,
    encoded (inputs of up to `max_length` wordpieces, `max_tokens_per_batch` per batch, on `device`) into an
    every-word store of `dtype` that the analyses of the same sentences, model and extraction settings share."""

    min_contexts_floor = 1

    def __init__(self, name: str, sentences: dict[str, Any], split: str, max_sentences: int | None,
                 min_contexts: int, lowercase: bool, max_length: int, dtype: str, max_tokens_per_batch: int,
                 device: str):
        super().__init__(name, sentences, split, max_sentences)
        if max_sentences is not None:
            require_int("analysis.max_sentences", max_sentences, minimum=1)
        self.min_contexts = require_int("analysis.min_contexts", min_contexts, minimum=self.min_contexts_floor)
        self.lowercase = require_bool("analysis.lowercase", lowercase)
        self.max_length = require_int("analysis.max_length", max_length, minimum=3)
        self.max_tokens_per_batch = require_int("analysis.max_tokens_per_batch", max_tokens_per_batch, minimum=1)
        self.dtype, self.device = str(dtype), analysis_device(device)

    def sentence_words(self) -> tuple[Any, list[tuple[str, ...]]]:
        """The loaded data of `analysis.sentences` and the word sequences of `analysis.split` (all: every split)."""
        data = self.sentences.load()
        splits = list(data.splits) if self.split == ALL_SPLITS else [str(self.split)]
        texts = [text for split in splits for text in texts_of(data, split)]
        return data, text_sentences(texts[:self.max_sentences])

    def occurrences(self) -> tuple[Any, Occurrences]:
        """The loaded data and the occurrences of its words, refused (before any model or store work) when no word
        is in `min_contexts` sentences."""
        data, sentences = self.sentence_words()
        occurrences = collect_occurrences(sentences, self.lowercase)
        require_contexts(occurrences, self.min_contexts)
        return data, occurrences

    def encoder(self, model: ModelSettings) -> SentenceWordEncoder:
        return SentenceWordEncoder(model.name_or_path, max_length=self.max_length, device=str(self.device),
                                   revision=model.revision, random_init=model.random_init, init_seed=model.init_seed)

    def store(self, store_dir: str, data: Any, occurrences: Occurrences, encoder: SentenceWordEncoder) -> Path:
        """The every-word store of `occurrences` below `store_dir` (built, resumed or verified)."""
        return extract_occurrences(occurrences.records(), encoder, store_root(store_dir), data.name, str(self.split),
                                   data.files, dtype=self.dtype, max_tokens_per_batch=self.max_tokens_per_batch).path


class Contextuality(OccurrenceAnalysis):
    """conf/analysis/contextuality.yaml: the measures of the hidden states `layers` (None: all), averaged over
    `samples` words and `sentence_samples` sentences drawn with `seed`; MEV of centred occurrences when
    `mev_centered`."""

    name = CONTEXTUALITY
    report = contextuality_report
    min_contexts_floor = 2

    def __init__(self, samples: int, sentence_samples: int, seed: int, mev_centered: bool, layers: Any,
                 **settings: Any):
        super().__init__(**settings)
        self.samples = require_int("analysis.samples", samples, minimum=2)
        self.sentence_samples = require_int("analysis.sentence_samples", sentence_samples, minimum=1)
        self.seed = require_int("analysis.seed", seed, minimum=0)
        self.mev_centered = require_bool("analysis.mev_centered", mev_centered)
        self.layers = layers

    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        """Every measure of every asked layer, with the sample sizes and the seed; writes the CSV and the figure."""
        data, occurrences = self.occurrences()
        model = inputs.model
        encoder = self.encoder(model)
        layers = chosen_layers(self.layers, encoder.info.num_layers)
        started = time.perf_counter()
        path = self.store(inputs.store_dir, data, occurrences, encoder)
        extract_s = time.perf_counter() - started
        with FeatureStore(path) as store:
            occurrences, skipped = stored_occurrences(store, occurrences)
            samples = checked_samples(occurrences, self.min_contexts, self.samples, self.sentence_samples, self.seed)
            by_layer = [{"layer": layer, **measures.layer_measures(store.read_layer(layer), occurrences.sentence,
                                                                   samples, self.mev_centered)} for layer in layers]
        results = {
            **model.described(), "model_task": finetuned_task(model.name_or_path),
            "weights_sha256": encoder.info.weights_sha256, "tokenizer_sha256": encoder.info.tokenizer_sha256,
            "num_layers": encoder.info.num_layers, "sentence_source": f"{data.name} {self.split}",
            "sentences": len(occurrences.sentences), "min_contexts": self.min_contexts, "samples": self.samples,
            "sentence_samples": self.sentence_samples, "seed": self.seed, "mev_centered": self.mev_centered,
            **samples.counts(), "occurrences_skipped": skipped, "store": str(path),
            "extract_s": round(extract_s, 2), "measure_s": round(time.perf_counter() - started - extract_s, 2),
            "layers": by_layer,
        }
        self.report.write_layer_csv(results, run_dir / "contextuality.csv")
        self.report.plot_contextuality([results], run_dir / "contextuality.png")
        log.info("contextuality of %s: %s", model.name, "; ".join(
            f"L{row['layer']} aniso {row['anisotropy']:.3f} self* {row['self_similarity_adjusted']:.3f}"
            for row in by_layer))
        return results

    def metrics(self, results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """Every measure of a layer, at the step of the layer."""
        return [(row["layer"], {key: value for key, value in row.items() if key != "layer"})
                for row in results["layers"]]


def require_contexts(occurrences: Occurrences, min_contexts: int) -> None:
    """Refuse, before any model or store work, sentences in which no word occurs in `min_contexts` distinct ones."""
    if not word_index(occurrences, min_contexts):
        raise ConfigError(f"no word of the {len(occurrences.sentences)} sentences occurs in {min_contexts} distinct "
                          "sentences (analysis.min_contexts). Fix: use more sentences (analysis.max_sentences=null, "
                          "analysis.split=all, or a larger analysis.sentences) or lower analysis.min_contexts")


def stored_occurrences(store: FeatureStore, occurrences: Occurrences) -> tuple[Occurrences, int]:
    """The occurrences the store holds a row for (the encoder may skip some), and how many it skipped."""
    kept = np.zeros(len(occurrences), bool)
    kept[store.row_ids()] = True
    return occurrences.subset(kept), int((~kept).sum())


def chosen_layers(layers: Any, num_layers: int) -> list[int]:
    """`analysis.layers` (null = all) as hidden-state indices of a model with `num_layers` of them (0 = embeddings)."""
    if layers is None:
        return list(range(num_layers))
    chosen = [layers] if isinstance(layers, int) else list(layers)
    bad = [layer for layer in chosen if isinstance(layer, bool) or not isinstance(layer, int)
           or not 0 <= layer < num_layers]
    if bad or not chosen:
        raise ConfigError(f"analysis.layers={list(chosen)}: this model has the layers 0..{num_layers - 1} (0 = the "
                          f"embeddings). Fix: analysis.layers=null for all, or a list within 0..{num_layers - 1}")
    return sorted(set(chosen))


def checked_samples(occurrences: Occurrences, min_contexts: int, words: int, sentences: int,
                    seed: int) -> measures.Samples:
    """The seeded draws of `words` words and `sentences` sentences; a corpus without a word in `min_contexts`
    sentences is refused, a smaller one than asked is used whole and logged."""
    samples = measures.draw_samples(occurrences, min_contexts, words, sentences, seed)
    if not samples.words:
        raise ConfigError(f"no word of the {len(occurrences.sentences)} sentences occurs in "
                          f"{min_contexts} distinct sentences. Fix: use more sentences "
                          "(analysis.max_sentences=null, analysis.split=all) or lower analysis.min_contexts")
    if not samples.sentences or len(set(occurrences.sentence[samples.baseline].tolist())) < 2:
        raise ConfigError("fewer than 2 sentences with 2 or more words: there is no intra-sentence similarity or "
                          "anisotropy baseline. Fix: use more sentences (analysis.max_sentences=null)")
    for asked, used, what in ((words, len(samples.words), "words"), (sentences, len(samples.sentences), "sentences")):
        if used < asked:
            log.warning("only %d %s qualify, fewer than the %d asked: all of them are used", used, what, asked)
    return samples
