"""analyze.py analysis=attention_similarity compare_to=<model>: Zhao et al. 2020 Fig. 7 between `model` and
`compare_to` on `analysis.sentences`.

The component of conf/analysis/attention_similarity.yaml. The cosines come from probing.geometry.attention_similarity,
the heatmap from probing.report.attention; the run folder gets attention_similarity.csv (a row per layer and head) and
attention_similarity.png. Every layer is compared, so the top-level `layer=` is refused: nothing would read it.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from probing.analysis import Analysis, AnalysisInputs, analysis_device
from probing.data.files import open_atomically
from probing.data.sentences import Text
from probing.data.settings import optional_int, require_int
from probing.errors import ConfigError, ModelLoadError, setting
from probing.features.finetuned import finetuned_task
from probing.geometry import attention_similarity as attention
from probing.report import attention as attention_report
from probing.report.aggregate import RESULTS_FILE

log = logging.getLogger(__name__)


class AttentionSimilarity(Analysis):
    """conf/analysis/attention_similarity.yaml: sentences of up to `max_length` wordpieces (None: the models' limit),
    `batch_size` of them per forward pass on `device`."""

    report = attention_report
    instead_of_layer = ("it compares the attention maps of every layer and head", "leave layer unset (layer=null): "
                        "the results hold the cosine of every layer and head, attention_similarity.csv a row each")

    def __init__(self, name: str, sentences: dict[str, Any], split: str, max_sentences: int | None,
                 max_length: int | None, batch_size: int, device: str):
        super().__init__(name, sentences, split, max_sentences)
        self.batch_size = require_int(setting("batch_size"), batch_size, minimum=1)
        self.max_length = optional_int(setting("max_length"), max_length, minimum=3, null="the models' limit")
        self.device = analysis_device(device)

    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        """The cosine of each layer and head, and what identifies both models; writes the CSV and the heatmap."""
        if not inputs.compare_to:
            raise ConfigError("compare_to is not set: the attention maps of `model` are compared with those of "
                              "another model. Fix: compare_to=<train run>/model (a model fine-tuned by train.py)")
        compare_to, model = str(inputs.compare_to), inputs.model
        texts, source = self.texts()
        first = attention.load_attention_model(model.name_or_path, **model.load_arguments())
        second = load_compared_model(compare_to)
        attention.check_comparable(first, second)
        max_length = attention.usable_max_length(self.max_length, first, second)
        cosine, cut = self.cosine(first, second, texts, max_length)
        layers, heads = cosine.shape
        results = {
            **model.described(), "model_task": finetuned_task(model.name_or_path), "compare_to": compare_to,
            "compare_to_task": finetuned_task(compare_to), "weights_sha256": first[2].weights_sha256,
            "compare_to_weights_sha256": second[2].weights_sha256, "tokenizer_sha256": first[2].tokenizer_sha256,
            "sentence_source": source, "sentences": len(texts), "max_length": max_length, "sentences_cut": cut,
            "layers": layers, "heads": heads, "cosine": cosine.tolist(), "layer_means": cosine.mean(axis=1).tolist(),
            "device": str(self.device),
        }
        write_similarity_csv(cosine, run_dir / "attention_similarity.csv")
        self.report.plot_heatmap(results, run_dir / "attention_similarity.png")
        log.info("attention-map similarity %s vs %s, mean by layer: %s", model.name, compare_to,
                 " ".join(f"{value:.3f}" for value in results["layer_means"]))
        return results

    def cosine(self, first: attention.Loaded, second: attention.Loaded, texts: list[Text],
               max_length: int) -> tuple[np.ndarray, int]:
        """(layers, heads) cosines over `texts` cut to `max_length` wordpieces, and how many were cut."""
        tokenizer = first[1]
        encoded, cut = attention.encode_texts(tokenizer, texts, max_length)
        if cut:
            log.warning("%d of %d sentences are longer than %d wordpieces: cut", cut, len(texts), max_length)
        batches = attention.batches(encoded, tokenizer.pad_token_id, self.batch_size)
        cosine = attention.attention_similarity(first[0], second[0], batches, device=self.device,
                                                total=math.ceil(len(encoded) / self.batch_size))
        return cosine, cut

    def metrics(self, results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """The mean cosine of each layer, at the step of the layer (from 1)."""
        return [(layer, {"cosine_mean": value}) for layer, value in enumerate(results["layer_means"], start=1)]


def load_compared_model(compare_to: str) -> attention.Loaded:
    """The model of `compare_to`; one that cannot be loaded names the setting, and for the folder of a train run the
    model folder inside it."""
    try:
        return attention.load_attention_model(compare_to)
    except ModelLoadError as error:
        try:
            exported = json.loads((Path(compare_to).expanduser() / RESULTS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            exported = {}
        if isinstance(exported, dict) and exported.get("model_dir"):
            raise ConfigError(f"compare_to={compare_to} is the folder of a train.py run, not a model folder. Fix: "
                              f"compare_to={exported['model_dir']} (the model it exported)") from error
        raise ConfigError(f"compare_to={compare_to}: {error}") from error


def write_similarity_csv(cosine: np.ndarray, path: Path) -> None:
    """One row per (layer, head), both counted from 1."""
    with open_atomically(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "head", "cosine"])
        writer.writerows([layer + 1, head + 1, f"{value:.6f}"] for (layer, head), value in np.ndenumerate(cosine))
