"""analyze.py: analyses of encoders that train nothing, each a config in conf/analysis/ whose `name` picks its function
in ANALYSES. An analysis function takes the composed config and the run folder, writes its own files there and
returns its results; `run` adds the analysis name, the wall time and the config, logs them through the Lightning
loggers of `logger` (CSV by default, W&B offline unless WANDB_MODE=online; no Trainer: `log_hyperparams` and
`log_metrics` with the layer as step) and writes results.json. A run whose results.json holds the same configuration
is not run again.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig

from probing.config import build
from probing.data.settings import choose, require_bool, require_int
from probing.data.word_benchmarks import read_similarity
from probing.errors import ConfigError, ModelLoadError
from probing.features.finetuned import finetuned_task
from probing.geometry import attention_similarity as attention
from probing.geometry import isotropy as iso
from probing.geometry.benchmarks import CORRELATIONS, MEASURES, average_scores, evaluate_spaces
from probing.geometry.sentences import texts_of
from probing.report.aggregate import RESULTS_FILE
from probing.report.attention import plot_heatmap
from probing.report.isotropy import plot_unused_cosine
from probing.tasks.common import (
    analysis_device,
    check_config,
    closing_loggers,
    job_state,
    write_json_atomically,
)
from probing.tasks.contextuality import contextuality
from probing.tasks.static_pc import all_rows, static_pc
from probing.vocabulary import ATTENTION_SIMILARITY, CONTEXTUALITY, ISOTROPY, STATIC_PC

log = logging.getLogger(__name__)

# The top-level settings of conf/analyze.yaml (anything else is a typo).
KNOWN_KEYS = ("task_name", "paths", "model", "analysis", "compare_to", "seed", "layer", "logger", "run_name",
              "run_group")


def run(cfg: DictConfig) -> dict[str, Any]:
    """Run the analysis `analysis.name` into the run folder; write and return its results."""
    check_config(cfg, KNOWN_KEYS)
    name = cfg.analysis.get("name")
    if name not in ANALYSES:
        raise ConfigError(f"analysis.name={name!r} is no analysis; there are {', '.join(ANALYSES)}. Fix: choose one "
                          f"with analysis=<name> (conf/analysis/<name>.yaml)")
    out, config, previous = job_state(cfg)
    if previous is not None:
        return previous
    started = time.time()
    L.seed_everything(cfg.seed, verbose=False)
    results = {"analysis": name, **ANALYSES[name](cfg, out.parent)}
    results |= {"duration_s": round(time.time() - started, 2), "config": config}
    with closing_loggers(cfg.get("logger")) as loggers:
        log_results(loggers, results)
    write_json_atomically(out, results)
    log.info("%s -> %s", name, out.parent)
    return results


def log_results(loggers: list[Logger], results: dict[str, Any]) -> None:
    """Log a finished analysis through the loggers of `logger` (built by `closing_loggers` once the analysis has
    succeeded, and closed by it): the resolved config as hyperparameters, the run's scalars (`logged_metrics`) at
    their steps (layers)."""
    for logger in loggers:
        logger.log_hyperparams(results["config"])
    for step, metrics in logged_metrics(results):
        for logger in loggers:
            logger.log_metrics(metrics, step=step)


def logged_metrics(results: dict[str, Any]) -> list[tuple[int, dict[str, float]]]:
    """(step, metrics) of an analysis's results, None values left out: contextuality per layer (step = layer),
    attention similarity per layer (from 1), isotropy's block and benchmark scores and static PC scores and coverage at
    the step of their layer (0 for the input embeddings)."""
    name = results["analysis"]
    if name == CONTEXTUALITY:
        steps = [(row["layer"], {key: value for key, value in row.items() if key != "layer"})
                 for row in results["layers"]]
    elif name == ATTENTION_SIMILARITY:
        steps = [(layer, {"cosine_mean": value}) for layer, value in enumerate(results["layer_means"], start=1)]
    elif name == ISOTROPY:
        block = {key: value for key, value in results["isotropy"].items() if key != "pc_removed"}
        scores = {f"{row['benchmark']}/{row['transform']}/{row['measure']}": row["score"]
                  for row in results["benchmarks"]}
        steps = [(results["layer"] or 0, {**block, **scores})]
    else:
        steps = [(results["layer"], static_pc_metrics(results["static_pc"]))]
    return [(step, {key: float(value) for key, value in metrics.items() if isinstance(value, (int, float))
                    and not isinstance(value, bool)}) for step, metrics in steps]


def static_pc_metrics(block: dict[str, Any]) -> dict[str, Any]:
    metrics = {"words": block["words"]}
    for row in all_rows(block):
        metrics |= {f"{row['benchmark']}/score": row["score"], f"{row['benchmark']}/covered": row["covered"]}
    return metrics


def load_sentences(settings: DictConfig) -> tuple[list, str]:
    """The texts of `analysis.sentences` (a data source), split `analysis.split`, and a label of where they are from."""
    data = build(settings.sentences, "analysis.sentences").load()
    texts = texts_of(data, settings.split, settings.max_sentences)
    return texts, f"{data.name} {settings.split}"


def attention_similarity(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Zhao et al. 2020 Fig. 7 between `model` and `compare_to`: attention_similarity.csv and .png, and the results."""
    settings = cfg.analysis
    if not cfg.compare_to:
        raise ConfigError("compare_to is not set: the attention maps of `model` are compared with those of another "
                          "model. Fix: compare_to=<train run>/model (a model fine-tuned by train.py)")
    batch_size = require_int("analysis.batch_size", settings.batch_size, minimum=1)
    if settings.max_length is not None:
        require_int("analysis.max_length", settings.max_length, minimum=3)
    device = analysis_device(settings.device)
    texts, source = load_sentences(settings)
    random_init = require_bool("model.random_init", cfg.model.get("random_init", False))
    first = attention.load_attention_model(cfg.model.name_or_path, cfg.model.get("revision"), random_init,
                                           int(cfg.model.get("init_seed", 0)))
    second = load_compared_model(str(cfg.compare_to))
    attention.check_comparable(first, second)
    max_length = attention.usable_max_length(settings.max_length, first, second)
    tokenizer = first[1]
    encoded, cut = attention.encode_texts(tokenizer, texts, max_length)
    if cut:
        log.warning("%d of %d sentences are longer than %d wordpieces: cut", cut, len(texts), max_length)
    cosine = attention.attention_similarity(first[0], second[0], attention.batches(encoded, tokenizer.pad_token_id,
                                                                                    batch_size),
                                            device=device, total=math.ceil(len(encoded) / batch_size))
    layers, heads = cosine.shape
    first_info, second_info = first[2], second[2]
    results = {
        "model": cfg.model.name, "model_name_or_path": cfg.model.name_or_path, "random_init": random_init,
        "model_task": finetuned_task(cfg.model.name_or_path), "compare_to": str(cfg.compare_to),
        "compare_to_task": finetuned_task(str(cfg.compare_to)), "weights_sha256": first_info.weights_sha256,
        "compare_to_weights_sha256": second_info.weights_sha256, "tokenizer_sha256": first_info.tokenizer_sha256,
        "sentence_source": source, "sentences": len(texts), "max_length": max_length, "sentences_cut": cut,
        "layers": layers, "heads": heads, "cosine": cosine.tolist(), "layer_means": cosine.mean(axis=1).tolist(),
        "device": str(device),
    }
    write_similarity_csv(cosine, run_dir / "attention_similarity.csv")
    plot_heatmap(results, run_dir / "attention_similarity.png")
    log.info("attention-map similarity %s vs %s, mean by layer: %s", cfg.model.name, cfg.compare_to,
             " ".join(f"{value:.3f}" for value in results["layer_means"]))
    return results


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
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "head", "cosine"])
        writer.writerows([layer + 1, head + 1, f"{value:.6f}"] for (layer, head), value in np.ndenumerate(cosine))


def isotropy(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Bis et al. 2021 Tables 1-2 and Fig. 3 on the input embeddings of `model` (layer=null) or on contextual word
    vectors of one layer: the isotropy block, the benchmark rows and the unused-token bins (csv and png)."""
    settings = cfg.analysis
    benchmarks, measures = isotropy_settings(settings)
    random_init = require_bool("model.random_init", cfg.model.get("random_init", False))
    model, tokenizer, info = iso.load_model(cfg.model.name_or_path, cfg.model.get("revision"), random_init,
                                            int(cfg.model.get("init_seed", 0)))
    layer = iso.check_layer(cfg.get("layer"), model, cfg.model.name)
    W, spaces_of, source = isotropy_vectors(cfg, model, tokenizer, layer)
    removed = iso.check_removed(settings.pc_removed, W.shape[1])
    transformed = {name: transform(W) for name, transform in iso.transforms(removed).items()}
    rows = evaluate_spaces(spaces_of(transformed), benchmarks, measures, settings.correlation)
    unused, selection = (iso.fig3_token_ids(tokenizer.get_vocab(), len(W), settings.fallback_tokens)
                         if layer is None else ([], None))
    bins = iso.unused_token_cosine(transformed, unused, settings.bin_size) if unused else []
    results = {
        "model": cfg.model.name, "model_name_or_path": cfg.model.name_or_path, "random_init": random_init,
        "weights_sha256": info.weights_sha256, "layer": layer, "source": source,
        "isotropy": iso.table1(transformed, removed), "benchmarks": rows, "benchmark_average": average_scores(rows),
        "unused_tokens": {"count": len(unused), "selection": selection, "ids": [unused[0], unused[-1]] if unused
                          else [], "examples": tokenizer.convert_ids_to_tokens(unused[:5]),
                          "bin_size": settings.bin_size, "bins": bins},
    }
    write_isotropy_files(results, run_dir)
    log.info("isotropy of %s (%s): %s", cfg.model.name, source, " ".join(
        f"{key}={value:.3f}" for key, value in results["isotropy"].items() if key.startswith("I_W")))
    return results


def isotropy_settings(settings: DictConfig) -> tuple[list, list[str]]:
    """The benchmarks read (bad files refused before any model is loaded) and the measures, checked."""
    for key in ("max_vectors", "batch_size", "bin_size", "fallback_tokens"):
        require_int(f"analysis.{key}", settings[key], minimum=1)
    choose("analysis.correlation", settings.correlation, CORRELATIONS)
    measures = list(settings.measures)
    for measure in measures:
        choose("analysis.measures", measure, MEASURES)
    return [read_similarity(path) for path in settings.benchmarks or []], measures


def isotropy_vectors(cfg: DictConfig, model, tokenizer, layer: int | None) -> tuple[np.ndarray, Callable, str]:
    """(the vectors, a function from the transformed matrices to the benchmarks' word spaces, where they come from):
    the input embedding matrix, or one vector per word occurrence of `analysis.sentences` at `layer`."""
    if layer is None:
        lookup = iso.token_lookup(tokenizer)
        return (iso.input_embeddings(model, cfg.model.name), lambda mats: iso.embedding_spaces(mats, lookup),
                "input embeddings")
    settings = cfg.analysis
    texts, source = load_sentences(settings)
    W, words = iso.contextual_word_vectors(model, tokenizer, texts, layer, settings.max_vectors, settings.batch_size,
                                           analysis_device(settings.device))
    return W, lambda mats: iso.occurrence_spaces(mats, words), f"layer {layer}, {len(words)} words of {source}"


def write_isotropy_files(results: dict[str, Any], run_dir: Path) -> None:
    """isotropy_unused_cosine.csv and .png (Fig. 3) when the vocabulary has unused tokens, isotropy_benchmarks.csv when
    benchmarks ran."""
    run_dir.mkdir(parents=True, exist_ok=True)
    bins = results["unused_tokens"]["bins"]
    if bins:
        write_rows(bins, run_dir / "isotropy_unused_cosine.csv")
        plot_unused_cosine([results], run_dir / "isotropy_unused_cosine.png")
    if results["benchmarks"]:
        write_rows([{**row, "missing_examples": " ".join(row["missing_examples"])} for row in results["benchmarks"]],
                   run_dir / "isotropy_benchmarks.csv")


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


ANALYSES: dict[str, Callable[[DictConfig, Path], dict[str, Any]]] = {
    ATTENTION_SIMILARITY: attention_similarity,
    CONTEXTUALITY: contextuality,
    ISOTROPY: isotropy,
    STATIC_PC: static_pc,
}
