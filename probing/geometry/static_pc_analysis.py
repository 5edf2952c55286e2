"""analyze.py analysis=static_pc layer=N: PC static embeddings (Ethayarajh 2019, §4.3, Table 1) of hidden state N of
`model` on `analysis.sentences`, evaluated on the word benchmarks the config names.

The component of conf/analysis/static_pc.yaml. The occurrences and the every-word store are those of
probing.geometry.occurrence_analysis, shared with analysis=contextuality (the same store is reused when the
sentences, model and extraction settings agree); the static vectors come from probing.geometry.static_pc, the scores
from probing.geometry.benchmarks, the report section from probing.report.static_pc. Writes static_pc.csv (a row per
benchmark) and static_pc_vectors.txt (word2vec text format: a word and its vector per line) into the run folder.
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from probing.analysis import AnalysisInputs
from probing.data.files import open_atomically
from probing.data.settings import choose, require_bool, require_int
from probing.data.word_benchmarks import read_analogies, read_categorization, read_similarity
from probing.errors import setting
from probing.features.finetuned import finetuned_task
from probing.features.layers import resolve_layer
from probing.features.store import FeatureStore
from probing.geometry import static_pc as pc
from probing.geometry.benchmarks import CORRELATIONS, evaluate_similarity
from probing.geometry.occurrence_analysis import OccurrenceAnalysis, require_contexts, stored_occurrences
from probing.geometry.occurrences import word_index
from probing.report import static_pc as static_pc_report

log = logging.getLogger(__name__)

STATIC_VECTORS = "static_pc_vectors.txt"  # word2vec text format, in the run folder

# analysis.<key> -> the reader of its files
READERS = {"benchmarks": read_similarity, "analogies": read_analogies, "categorization": read_categorization}


class StaticPC(OccurrenceAnalysis):
    """conf/analysis/static_pc.yaml: the first principal component of each word's occurrence vectors (of the centred
    ones when `centered`), scored on the similarity files `benchmarks` (`correlation`), the `analogies` and the
    `categorization` files (k-means with `restarts` starts drawn with `seed`)."""

    report = static_pc_report
    instead_of_layer = None  # `layer` (required) is the hidden state whose occurrence vectors give the static ones

    def __init__(self, centered: bool, benchmarks: list[str], correlation: str, analogies: list[str],
                 categorization: list[str], restarts: int, seed: int, **settings: Any):
        super().__init__(**settings)
        self.restarts = require_int(setting("restarts"), restarts, minimum=1)
        self.seed = require_int(setting("seed"), seed, minimum=0)
        self.centered = require_bool(setting("centered"), centered)
        self.correlation = choose(setting("correlation"), correlation, CORRELATIONS)
        self.files = {"benchmarks": benchmarks, "analogies": analogies, "categorization": categorization}

    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        """The static vectors of layer `layer` and their benchmark scores (each with its coverage)."""
        files = {key: [READERS[key](path) for path in paths or []] for key, paths in self.files.items()}
        data, occurrences = self.occurrences()
        model = inputs.model
        encoder = self.encoder(model)
        last = encoder.info.num_layers - 1
        layer = resolve_layer(inputs.layer, encoder.info.num_layers, model=model.name,
                              fix=f"layer=1 (the paper's best), or a multirun layer=0,1,...,{last}")
        started = time.perf_counter()
        path = self.store(inputs.store_dir, data, occurrences, encoder)
        with FeatureStore(path) as store:
            occurrences, skipped = stored_occurrences(store, occurrences)
            vectors = store.read_layer(layer)
        require_contexts(occurrences, self.min_contexts)
        space = pc.static_embeddings(vectors, word_index(occurrences, self.min_contexts), self.centered)
        block = {"layer": layer, "words": len(space), "centered": self.centered, "correlation": self.correlation,
                 **evaluate(space, files, self.lowercase, self.correlation, self.restarts, self.seed)}
        results = {
            **model.described(), "model_task": finetuned_task(model.name_or_path),
            "weights_sha256": encoder.info.weights_sha256, "tokenizer_sha256": encoder.info.tokenizer_sha256,
            "num_layers": encoder.info.num_layers, "layer": layer, "sentence_source": f"{data.name} {self.split}",
            "sentences": len(occurrences.sentences), "occurrences": len(occurrences), "occurrences_skipped": skipped,
            "min_contexts": self.min_contexts, "store": str(path), "compute_s": round(time.perf_counter() - started, 2),
            "static_pc": block,
        }
        write_static_pc_files(results, space, run_dir)
        scores = "; ".join(f"{row['benchmark']} {score_text(row['score'])} ({row['covered']})"
                           for row in all_rows(block))
        log.info("static PC of %s, layer %d (%d words): %s", model.name, layer, len(space), scores or (
            f"vectors in {STATIC_VECTORS}, no benchmark scored (analysis.benchmarks, analysis.analogies, "
            "analysis.categorization name the files)"))
        return results

    def metrics(self, results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """The number of words and each benchmark's score and coverage, at the step of the layer."""
        block = results["static_pc"]
        metrics = {"words": block["words"]}
        for row in all_rows(block):
            metrics |= {f"{row['benchmark']}/score": row["score"], f"{row['benchmark']}/covered": row["covered"]}
        return [(results["layer"], metrics)]


def evaluate(space: dict[str, np.ndarray], files: dict[str, list], lowercase: bool, correlation: str, restarts: int,
             seed: int) -> dict[str, list[dict[str, Any]]]:
    """The rows of every benchmark kind; benchmark words are lower-cased like the occurrences when `lowercase`."""
    def normalize(word: str) -> str:
        return word.lower() if lowercase else word

    return {
        "similarity": [evaluate_similarity(lambda word: space.get(normalize(word)), benchmark, "cosine", correlation)
                       for benchmark in files["benchmarks"]],
        "analogy": [pc.analogy_accuracy(space, benchmark, normalize) for benchmark in files["analogies"]],
        "categorization": [pc.categorization_purity(space, benchmark, normalize, restarts, seed)
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
    with open_atomically(run_dir / "static_pc.csv", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "benchmark", "task", "score", "covered", "of", "missing_words"])
        writer.writerows([results["layer"], row["benchmark"], row.get("task", "similarity"),
                          "" if row["score"] is None else f"{row['score']:.6f}", row["covered"],
                          row.get("pairs", row.get("questions", row.get("items"))), row["missing_words"]]
                         for row in rows)
    with open_atomically(run_dir / STATIC_VECTORS) as handle:
        handle.write(f"{len(space)} {len(next(iter(space.values())))}\n")
        handle.writelines(f"{word} {' '.join(f'{value:.6f}' for value in vector)}\n" for word, vector in space.items())
