"""analyze.py analysis=contextuality: Ethayarajh 2019 (§3-4) per layer of `model` on `analysis.sentences`.

The sentences' words go to an every-word feature store (probing.features.sentence_store), the measures come from
probing.geometry.contextuality, the table and Figures 1-4 from probing.report.contextuality (also written into the
run folder: contextuality.csv, contextuality.png).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from probing.config import build
from probing.data.settings import require_bool, require_int
from probing.errors import ConfigError
from probing.features.finetuned import finetuned_task
from probing.features.provision import store_root
from probing.features.sentence_store import SentenceWordEncoder, extract_occurrences
from probing.features.store import FeatureStore
from probing.geometry import contextuality as measures
from probing.geometry.occurrences import Occurrences, collect_occurrences, text_sentences, word_index
from probing.geometry.sentences import texts_of
from probing.report.contextuality import plot_contextuality, write_layer_csv
from probing.tasks.common import analysis_device

log = logging.getLogger(__name__)

ALL_SPLITS = "all"
# analysis.<key> -> its smallest value
COUNTS = {"min_contexts": 2, "samples": 2, "sentence_samples": 1, "seed": 0, "max_length": 3,
          "max_tokens_per_batch": 1}


def contextuality(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Every measure of every asked layer, with the sample sizes and the seed; writes the CSV and the figure."""

    settings = cfg.analysis
    counts = {key: require_int(f"analysis.{key}", settings[key], minimum=low) for key, low in COUNTS.items()}
    centered = require_bool("analysis.mev_centered", settings.mev_centered)
    data, occurrences = sentence_occurrences(settings)
    require_contexts(occurrences, counts["min_contexts"])
    encoder, random_init = occurrence_encoder(cfg, counts["max_length"])
    layers = chosen_layers(settings.layers, encoder.info.num_layers)
    started = time.perf_counter()
    path = occurrence_store(cfg, data, occurrences, encoder, counts["max_tokens_per_batch"])
    extract_s = time.perf_counter() - started
    with FeatureStore(path) as store:
        occurrences, skipped = stored_occurrences(store, occurrences)
        samples = checked_samples(occurrences, counts)
        by_layer = [{"layer": layer, **measures.layer_measures(store.read_layer(layer), occurrences.sentence,
                                                               samples, centered)} for layer in layers]
    results = {
        "model": cfg.model.name, "model_name_or_path": cfg.model.name_or_path, "random_init": random_init,
        "model_task": finetuned_task(cfg.model.name_or_path), "weights_sha256": encoder.info.weights_sha256,
        "tokenizer_sha256": encoder.info.tokenizer_sha256, "num_layers": encoder.info.num_layers,
        "sentence_source": f"{data.name} {settings.split}", "sentences": len(occurrences.sentences),
        "min_contexts": counts["min_contexts"], "samples": counts["samples"],
        "sentence_samples": counts["sentence_samples"], "seed": counts["seed"], "mev_centered": centered,
        **samples.counts(), "occurrences_skipped": skipped, "store": str(path),
        "extract_s": round(extract_s, 2), "measure_s": round(time.perf_counter() - started - extract_s, 2),
        "layers": by_layer,
    }
    write_layer_csv(results, run_dir / "contextuality.csv")
    plot_contextuality([results], run_dir / "contextuality.png")
    log.info("contextuality of %s: %s", cfg.model.name, "; ".join(
        f"L{row['layer']} aniso {row['anisotropy']:.3f} self* {row['self_similarity_adjusted']:.3f}"
        for row in by_layer))
    return results


def sentence_occurrences(settings: DictConfig) -> tuple[Any, Occurrences]:
    """The loaded data of `analysis.sentences` and the occurrences of its words (`analysis.lowercase`)."""
    data, sentences = load_sentence_words(settings)
    return data, collect_occurrences(sentences, require_bool("analysis.lowercase", settings.lowercase))


def require_contexts(occurrences: Occurrences, min_contexts: int) -> None:
    """Refuse, before any model or store work, sentences in which no word occurs in `min_contexts` distinct ones."""
    if not word_index(occurrences, min_contexts):
        raise ConfigError(f"no word of the {len(occurrences.sentences)} sentences occurs in {min_contexts} distinct "
                          "sentences (analysis.min_contexts). Fix: use more sentences (analysis.max_sentences=null, "
                          "analysis.split=all, or a larger analysis.sentences) or lower analysis.min_contexts")


def occurrence_encoder(cfg: DictConfig, max_length: int) -> tuple[SentenceWordEncoder, bool]:
    """The every-word encoder of `model` (and whether it is randomly initialised)."""
    random_init = require_bool("model.random_init", cfg.model.get("random_init", False))
    encoder = SentenceWordEncoder(cfg.model.name_or_path, max_length=max_length,
                                  device=str(analysis_device(cfg.analysis.device)), revision=cfg.model.get("revision"),
                                  random_init=random_init, init_seed=int(cfg.model.get("init_seed", 0)))
    return encoder, random_init


def occurrence_store(cfg: DictConfig, data: Any, occurrences: Occurrences, encoder: SentenceWordEncoder,
                     max_tokens_per_batch: int) -> Path:
    """The every-word store of `occurrences` below `paths.store_dir` (built, resumed or verified)."""
    settings = cfg.analysis
    return extract_occurrences(occurrences.records(), encoder, store_root(cfg.paths.store_dir), data.name,
                               str(settings.split), data.files, dtype=str(settings.dtype),
                               max_tokens_per_batch=max_tokens_per_batch).path


def stored_occurrences(store: FeatureStore, occurrences: Occurrences) -> tuple[Occurrences, int]:
    """The occurrences the store holds a row for (the encoder may skip some), and how many it skipped."""
    kept = np.zeros(len(occurrences), bool)
    kept[store.row_ids()] = True
    return occurrences.subset(kept), int((~kept).sum())


def load_sentence_words(settings: DictConfig) -> tuple[Any, list[tuple[str, ...]]]:
    """The loaded data of `analysis.sentences` and the word sequences of `analysis.split` (all: every split)."""
    if settings.max_sentences is not None:
        require_int("analysis.max_sentences", settings.max_sentences, minimum=1)
    data = build(settings.sentences, "analysis.sentences")
    data = data.load()
    splits = list(data.splits) if settings.split == ALL_SPLITS else [str(settings.split)]
    texts = [text for split in splits for text in texts_of(data, split)]
    return data, text_sentences(texts[:settings.max_sentences])


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


def checked_samples(occurrences: Occurrences, counts: dict[str, int]) -> measures.Samples:
    """The seeded draws; a corpus without a word in `min_contexts` sentences is refused, a smaller one than asked is
    used whole and logged."""
    samples = measures.draw_samples(occurrences, counts["min_contexts"], counts["samples"],
                                    counts["sentence_samples"], counts["seed"])
    if not samples.words:
        raise ConfigError(f"no word of the {len(occurrences.sentences)} sentences occurs in "
                          f"{counts['min_contexts']} distinct sentences. Fix: use more sentences "
                          "(analysis.max_sentences=null, analysis.split=all) or lower analysis.min_contexts")
    if not samples.sentences or len(set(occurrences.sentence[samples.baseline].tolist())) < 2:
        raise ConfigError("fewer than 2 sentences with 2 or more words: there is no intra-sentence similarity or "
                          "anisotropy baseline. Fix: use more sentences (analysis.max_sentences=null)")
    for asked, used, what in ((counts["samples"], len(samples.words), "words"),
                              (counts["sentence_samples"], len(samples.sentences), "sentences")):
        if used < asked:
            log.warning("only %d %s qualify, fewer than the %d asked: all of them are used", used, what, asked)
    return samples
