"""analyze.py analysis=isotropy: Bis et al. 2021 Tables 1-2 and Fig. 3 on the input embeddings of `model` (layer=null)
or on contextual word vectors of one layer (layer=N, one per word occurrence of `analysis.sentences`).

The component of conf/analysis/isotropy.yaml. The measures come from probing.geometry.isotropy, the benchmark scores
from probing.geometry.benchmarks, Fig. 3 from probing.report.isotropy; the run folder gets isotropy_unused_cosine.csv
and .png (when the vocabulary has unused tokens) and isotropy_benchmarks.csv (when benchmarks ran).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from probing.analysis import Analysis, AnalysisInputs, analysis_device
from probing.data.files import open_atomically
from probing.data.settings import choose, require_int
from probing.data.word_benchmarks import read_similarity
from probing.errors import setting
from probing.features.hf_models import load_pretrained
from probing.features.layers import resolve_layer
from probing.geometry import isotropy as iso
from probing.geometry.benchmarks import CORRELATIONS, MEASURES, average_scores, evaluate_spaces
from probing.report import isotropy as isotropy_report

log = logging.getLogger(__name__)


class Isotropy(Analysis):
    """conf/analysis/isotropy.yaml: `pc_removed` components removed by the post-processing (None: ⌈d/100⌉), the
    word-similarity files `benchmarks` scored by each of `measures` with `correlation`, Fig. 3 in bins of `bin_size`
    ids (`fallback_tokens` last ids for a vocabulary without unused tokens); for layer=N, up to `max_vectors` word
    vectors, `batch_size` sentences per forward pass on `device` (resolved only then)."""

    report = isotropy_report
    instead_of_layer = None  # `layer` picks the vectors: null = the input embeddings, N = hidden state N

    def __init__(self, name: str, sentences: dict[str, Any], split: str, max_sentences: int | None,
                 max_vectors: int, batch_size: int, device: str, pc_removed: int | None, benchmarks: Sequence[str],
                 measures: Sequence[str], correlation: str, bin_size: int, fallback_tokens: int):
        super().__init__(name, sentences, split, max_sentences)
        self.max_vectors, self.batch_size, self.bin_size, self.fallback_tokens = (
            require_int(setting(key), value, minimum=1) for key, value in (
                ("max_vectors", max_vectors), ("batch_size", batch_size), ("bin_size", bin_size),
                ("fallback_tokens", fallback_tokens)))
        self.correlation = choose(setting("correlation"), correlation, CORRELATIONS)
        self.measures = [choose(setting("measures"), measure, MEASURES) for measure in measures]
        self.device, self.pc_removed, self.benchmarks = device, pc_removed, list(benchmarks or [])

    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        """The isotropy block, the benchmark rows and the unused-token bins; writes their files."""
        benchmarks = [read_similarity(path) for path in self.benchmarks]  # bad files refused before the model loads
        model = inputs.model
        encoder, tokenizer, info = load_pretrained(model.name_or_path, **model.load_arguments())
        layer = chosen_layer(inputs.layer, info.num_layers, model.name)
        W, spaces_of, source = self.vectors(encoder, tokenizer, layer, model.name)
        removed = iso.check_removed(self.pc_removed, W.shape[1])
        transformed = {name: transform(W) for name, transform in iso.transforms(removed).items()}
        rows = evaluate_spaces(spaces_of(transformed), benchmarks, self.measures, self.correlation)
        unused, selection = (iso.fig3_token_ids(tokenizer.get_vocab(), len(W), self.fallback_tokens)
                             if layer is None else ([], None))
        bins = iso.unused_token_cosine(transformed, unused, self.bin_size) if unused else []
        results = {
            **model.described(), "weights_sha256": info.weights_sha256, "layer": layer, "source": source,
            "isotropy": iso.table1(transformed, removed), "benchmarks": rows, "benchmark_average": average_scores(rows),
            "unused_tokens": {"count": len(unused), "selection": selection, "ids": [unused[0], unused[-1]] if unused
                              else [], "examples": tokenizer.convert_ids_to_tokens(unused[:5]),
                              "bin_size": self.bin_size, "bins": bins},
        }
        self.write_files(results, run_dir)
        log.info("isotropy of %s (%s): %s", model.name, source, " ".join(
            f"{key}={value:.3f}" for key, value in results["isotropy"].items() if key.startswith("I_W")))
        if rows:
            log.info("word similarity, %s correlation averaged over %d benchmark(s) (isotropy_benchmarks.csv): %s",
                     self.correlation, len({row["benchmark"] for row in rows}),
                     averages_text(results["benchmark_average"]))
        return results

    def vectors(self, encoder: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, layer: int | None,
                model_name: str) -> tuple[np.ndarray, Callable, str]:
        """(the vectors, a function from the transformed matrices to the benchmarks' word spaces, where they come
        from): the input embedding matrix, or one vector per word occurrence of `analysis.sentences` at `layer`."""
        if layer is None:
            lookup = iso.token_lookup(tokenizer)
            return (iso.input_embeddings(encoder, model_name), lambda mats: iso.embedding_spaces(mats, lookup),
                    "input embeddings")
        texts, source = self.texts()
        W, words = iso.contextual_word_vectors(encoder, tokenizer, texts, layer, self.max_vectors, self.batch_size,
                                               analysis_device(self.device))
        return W, lambda mats: iso.occurrence_spaces(mats, words), f"layer {layer}, {len(words)} words of {source}"

    def write_files(self, results: dict[str, Any], run_dir: Path) -> None:
        """isotropy_unused_cosine.csv and .png (Fig. 3) when the vocabulary has unused tokens, isotropy_benchmarks.csv
        when benchmarks ran."""
        run_dir.mkdir(parents=True, exist_ok=True)
        bins = results["unused_tokens"]["bins"]
        if bins:
            write_rows(bins, run_dir / "isotropy_unused_cosine.csv")
            self.report.plot_unused_cosine([results], run_dir / "isotropy_unused_cosine.png")
        rows = [{**row, "missing_examples": " ".join(row["missing_examples"])} for row in results["benchmarks"]]
        if rows:
            write_rows(rows, run_dir / "isotropy_benchmarks.csv")

    def metrics(self, results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """The isotropy block and the benchmark scores, at the step of the layer (0 for the input embeddings)."""
        block = {key: value for key, value in results["isotropy"].items() if key != "pc_removed"}
        scores = {f"{row['benchmark']}/{row['transform']}/{row['measure']}": row["score"]
                  for row in results["benchmarks"]}
        return [(results["layer"] or 0, {**block, **scores})]


def chosen_layer(layer: Any, num_layers: int, model: str) -> int | None:
    """`layer` as None (the input embedding matrix) or a hidden state of `model`, which has `num_layers` of them."""
    if layer is None:
        return None
    return resolve_layer(layer, num_layers, model=model,
                         fix=f"layer={num_layers - 1}, or layer=null for the input embedding matrix")


def averages_text(averages: dict[str, dict[str, float | None]]) -> str:
    """'original cosine 0.658 dot 0.645; centered ...': the benchmark average of each transform and measure."""
    return "; ".join(f"{transform} " + " ".join(f"{measure} {'-' if score is None else f'{score:.3f}'}"
                                                for measure, score in measures.items())
                     for transform, measures in averages.items())


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    with open_atomically(path, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
