"""analyze.py analysis=contextuality: Ethayarajh 2019 (§3-4) per layer of `model` on `analysis.sentences`.

The component of conf/analysis/contextuality.yaml. The sentences' words go to the every-word feature store of
probing.geometry.occurrence_analysis (shared with analysis=static_pc), the measures come from
probing.geometry.contextuality, the table and Figures 1-4 from probing.report.contextuality (also written into the
run folder: contextuality.csv, contextuality.png). It measures the hidden states of `analysis.layers`, and refuses
the top-level `layer=`, which it does not read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from probing.analysis import AnalysisInputs
from probing.data.settings import require_bool, require_int
from probing.errors import ConfigError, setting
from probing.features.finetuned import finetuned_task
from probing.features.layers import resolve_layer
from probing.features.store import FeatureStore
from probing.geometry import contextuality as measures
from probing.geometry.occurrence_analysis import OccurrenceAnalysis, stored_occurrences
from probing.geometry.occurrences import Occurrences
from probing.report import contextuality as contextuality_report

log = logging.getLogger(__name__)


class Contextuality(OccurrenceAnalysis):
    """conf/analysis/contextuality.yaml: the measures of the hidden states `layers` (None: all), averaged over
    `samples` words and `sentence_samples` sentences drawn with `seed`; MEV of centred occurrences when
    `mev_centered`."""

    report = contextuality_report
    instead_of_layer = (f"it measures the hidden states of {setting('layers')}, null = every one",
                        f"{setting('layers')}=[{{layer}}], and leave layer unset")
    min_contexts_floor = 2

    def __init__(self, samples: int, sentence_samples: int, seed: int, mev_centered: bool, layers: Any,
                 **settings: Any):
        super().__init__(**settings)
        self.samples = require_int(setting("samples"), samples, minimum=2)
        self.sentence_samples = require_int(setting("sentence_samples"), sentence_samples, minimum=1)
        self.seed = require_int(setting("seed"), seed, minimum=0)
        self.mev_centered = require_bool(setting("mev_centered"), mev_centered)
        self.layers = layers

    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        """Every measure of every asked layer, with the sample sizes and the seed; writes the CSV and the figure."""
        data, occurrences = self.occurrences()
        model = inputs.model
        encoder = self.encoder(model)
        layers = chosen_layers(self.layers, encoder.info.num_layers, model.name)
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


def chosen_layers(layers: Any, num_layers: int, model: str = "this model") -> list[int]:
    """The analysis's `layers` (null = all; one layer or a list, negative counting from the top) as the sorted
    hidden-state indices of `model`, which has `num_layers` of them (0 = the embeddings)."""
    if layers is None:
        return list(range(num_layers))
    chosen = list(layers) if isinstance(layers, Sequence) and not isinstance(layers, str) else [layers]
    name = setting("layers")
    fix = f"{name}=null for all, or a list within 0..{num_layers - 1}"
    if not chosen:
        raise ConfigError(f"{name}=[] names no layer of {model}, whose hidden states are 0..{num_layers - 1}. "
                          f"Fix: {fix}")
    return sorted({resolve_layer(layer, num_layers, name, model, fix) for layer in chosen})


def checked_samples(occurrences: Occurrences, min_contexts: int, words: int, sentences: int,
                    seed: int) -> measures.Samples:
    """The seeded draws of `words` words and `sentences` sentences; a corpus without a word in `min_contexts`
    sentences is refused, a smaller one than asked is used whole and logged."""
    samples = measures.draw_samples(occurrences, min_contexts, words, sentences, seed)
    if not samples.words:
        raise ConfigError(f"no word of the {len(occurrences.sentences)} sentences occurs in "
                          f"{min_contexts} distinct sentences. Fix: use more sentences "
                          f"({setting('max_sentences')}=null, {setting('split')}=all) or lower "
                          f"{setting('min_contexts')}")
    if not samples.sentences or len(set(occurrences.sentence[samples.baseline].tolist())) < 2:
        raise ConfigError("fewer than 2 sentences with 2 or more words: there is no intra-sentence similarity or "
                          f"anisotropy baseline. Fix: use more sentences ({setting('max_sentences')}=null)")
    for asked, used, what in ((words, len(samples.words), "words"), (sentences, len(samples.sentences), "sentences")):
        if used < asked:
            log.warning("only %d %s qualify, fewer than the %d asked: all of them are used", used, what, asked)
    return samples
