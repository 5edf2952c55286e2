"""analyze.py analysis=static_pc layer=N: PC static embeddings (Ethayarajh 2019, §4.3, Table 1) of hidden state N of
`model` on `analysis.sentences`, evaluated on the word benchmarks the config names.

The occurrences and the every-word store are those of the contextuality analysis (the same store is reused when the
sentences, model and extraction settings agree); the static vectors come from probing.geometry.static_pc, the scores
from probing.geometry.benchmarks. Writes static_pc.csv (a row per benchmark) and static_pc_vectors.txt (word2vec text
format: a word and its vector per line) into the run folder.
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from probing.data.settings import choose, require_bool, require_int
from probing.data.word_benchmarks import read_analogies, read_categorization, read_similarity
from probing.features.finetuned import finetuned_task
from probing.features.store import FeatureStore
from probing.geometry import static_pc as pc
from probing.geometry.benchmarks import CORRELATIONS, evaluate_similarity
from probing.geometry.isotropy import check_hidden_state
from probing.geometry.occurrences import word_index
from probing.tasks.contextuality import (
    occurrence_encoder,
    occurrence_store,
    require_contexts,
    sentence_occurrences,
    stored_occurrences,
)

log = logging.getLogger(__name__)

# analysis.<key> -> its smallest value
COUNTS = {"min_contexts": 1, "max_length": 3, "max_tokens_per_batch": 1, "restarts": 1, "seed": 0}
# analysis.<key> -> the reader of its files
READERS = {"benchmarks": read_similarity, "analogies": read_analogies, "categorization": read_categorization}


def static_pc(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """The static vectors of layer `layer` and their benchmark scores (each with its coverage)."""
    settings = cfg.analysis
    counts = {key: require_int(f"analysis.{key}", settings[key], minimum=low) for key, low in COUNTS.items()}
    centered = require_bool("analysis.centered", settings.centered)
    choose("analysis.correlation", settings.correlation, CORRELATIONS)
    files = {key: [read(path) for path in settings[key] or []] for key, read in READERS.items()}
    data, occurrences = sentence_occurrences(settings)
    require_contexts(occurrences, counts["min_contexts"])
    encoder, random_init = occurrence_encoder(cfg, counts["max_length"])
    last = encoder.info.num_layers - 1
    layer = check_hidden_state(cfg.get("layer"), last, cfg.model.name,
                               f"layer=1 (the paper's best), or a multirun layer=0,1,...,{last}")
    started = time.perf_counter()
    path = occurrence_store(cfg, data, occurrences, encoder, counts["max_tokens_per_batch"])
    with FeatureStore(path) as store:
        occurrences, skipped = stored_occurrences(store, occurrences)
        vectors = store.read_layer(layer)
    require_contexts(occurrences, counts["min_contexts"])
    space = pc.static_embeddings(vectors, word_index(occurrences, counts["min_contexts"]), centered)
    lowercase = require_bool("analysis.lowercase", settings.lowercase)
    block = {"layer": layer, "words": len(space), "centered": centered, "correlation": str(settings.correlation),
             **evaluate(space, files, lowercase, settings.correlation, counts)}
    results = {
        "model": cfg.model.name, "model_name_or_path": cfg.model.name_or_path, "random_init": random_init,
        "model_task": finetuned_task(cfg.model.name_or_path), "weights_sha256": encoder.info.weights_sha256,
        "tokenizer_sha256": encoder.info.tokenizer_sha256, "num_layers": encoder.info.num_layers, "layer": layer,
        "sentence_source": f"{data.name} {settings.split}", "sentences": len(occurrences.sentences),
        "occurrences": len(occurrences), "occurrences_skipped": skipped, "min_contexts": counts["min_contexts"],
        "store": str(path), "compute_s": round(time.perf_counter() - started, 2), "static_pc": block,
    }
    write_static_pc_files(results, space, run_dir)
    log.info("static PC of %s, layer %d (%d words): %s", cfg.model.name, layer, len(space), "; ".join(
        f"{row['benchmark']} {score_text(row['score'])} ({row['covered']})" for row in all_rows(block)))
    return results


def evaluate(space: dict[str, np.ndarray], files: dict[str, list], lowercase: bool, correlation: str,
             counts: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    """The rows of every benchmark kind; benchmark words are lower-cased like the occurrences when `lowercase`."""
    def normalize(word: str) -> str:
        return word.lower() if lowercase else word

    return {
        "similarity": [evaluate_similarity(lambda word: space.get(normalize(word)), benchmark, "cosine", correlation)
                       for benchmark in files["benchmarks"]],
        "analogy": [pc.analogy_accuracy(space, benchmark, normalize) for benchmark in files["analogies"]],
        "categorization": [pc.categorization_purity(space, benchmark, normalize, counts["restarts"], counts["seed"])
                           for benchmark in files["categorization"]],
    }


def all_rows(block: dict[str, Any]) -> list[dict[str, Any]]:
    return [*block["similarity"], *block["analogy"], *block["categorization"]]


def score_text(score: float | None) -> str:
    return "-" if score is None else f"{score:.3f}"


def write_static_pc_files(results: dict[str, Any], space: dict[str, np.ndarray], run_dir: Path) -> None:
    """static_pc.csv (a row per benchmark: kind, score, coverage) and static_pc_vectors.txt."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = all_rows(results["static_pc"])
    with open(run_dir / "static_pc.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "benchmark", "task", "score", "covered", "of", "missing_words"])
        writer.writerows([results["layer"], row["benchmark"], row.get("task", "similarity"),
                          "" if row["score"] is None else f"{row['score']:.6f}", row["covered"],
                          row.get("pairs", row.get("questions", row.get("items"))), row["missing_words"]]
                         for row in rows)
    with open(run_dir / "static_pc_vectors.txt", "w", encoding="utf-8") as handle:
        handle.write(f"{len(space)} {len(next(iter(space.values())))}\n")
        handle.writelines(f"{word} {' '.join(f'{value:.6f}' for value in vector)}\n" for word, vector in space.items())
