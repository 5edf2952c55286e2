"""analyze.py: analyses of encoders that train nothing, each a config in conf/analysis/ whose `_target_` builds
its component (in the wing it belongs to); `run` builds it, runs it and writes results.json.

See docs/development.md, 'Adding an analysis'.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf

from probing.analysis import Analysis, AnalysisInputs, ModelSettings, build_analysis
from probing.config import keyed_errors
from probing.errors import ConfigError
from probing.features.featurizers import featurizer_config, plain
from probing.tasks.loggers import closing_loggers, name_the_run
from probing.tasks.results_file import running_job, write_results
from probing.tasks.settings import check_config, with_data_settings, with_run_folders

log = logging.getLogger(__name__)

# The settings of `features` that say where and how the stores are kept (analysis=neurons's `store`).
STORE_SETTINGS = ("store_dir", "dtype", "max_tokens_per_batch", "lock_wait_s")
# Nodes that a task's config (conf/task/) brings along for probe.py and train.py, and that no analysis reads.
UNREAD_NODES = ("trainer", "probe", "callbacks", "finetune")


def run(cfg: DictConfig) -> dict[str, Any]:
    """Run the analysis of `analysis` into the run folder; write and return its results."""
    check_config(cfg)
    with_run_folders(cfg)
    with_data_settings(cfg)
    refuse_unread_overrides(command_line_overrides(), cfg.analysis.get("name"))
    analysis = build_analysis(cfg.analysis, **job_settings(cfg))
    inputs = AnalysisInputs(ModelSettings.of(cfg.model), cfg.get("layer"), cfg.get("compare_to"), cfg.paths.store_dir)
    # what the analysis refuses once built (its checks of the job's inputs, its run) is named where the user sets it
    keys = {"model": "model", "layer": "layer", "compare_to": "compare_to", "store": "features",
            "source": "data.source"}
    with keyed_errors(cfg.analysis, "analysis", keys):
        analysis.check_inputs(inputs)
    name_the_run(cfg, *run_name(cfg))
    with running_job(cfg) as (out, config, previous):
        if previous is not None:
            return previous
        started = time.time()
        L.seed_everything(cfg.seed, verbose=False)
        with keyed_errors(cfg.analysis, "analysis", keys):
            results = {"analysis": analysis.name, **analysis.run(inputs, out.parent)}
        results |= {"duration_s": round(time.time() - started, 2), "config": config}
        with closing_loggers(cfg.get("logger")) as loggers:
            log_results(loggers, config, logged_metrics(analysis, results))
        results = write_results(out, results, analysis.name)
    log.info("%s -> %s", analysis.name, out.parent)
    return results


def run_name(cfg: DictConfig) -> tuple[str, str]:
    """The name and group of the run in W&B: model-analysis-layer<layer>-seed<seed>, model-analysis."""
    group = f"{cfg.model.name}-{cfg.analysis.name}"
    return f"{group}-layer{cfg.get('layer')}-seed{cfg.seed}", group


def job_settings(cfg: DictConfig) -> dict[str, Callable[[], Any]]:
    """What this job knows that an analysis may take when it is built (`Analysis.from_the_job`), each computed when
    asked for: the word task of `task=` and its data, what fills the stores (`model`, `features`, `context_size`,
    as probe.py's) and how they are kept, the model's configured layer count, the seed."""
    return {"task": lambda: OmegaConf.select(cfg, "task.name"), "kind": lambda: OmegaConf.select(cfg, "task.kind"),
            "data_name": lambda: OmegaConf.select(cfg, "data.name"),
            "source": lambda: plain(OmegaConf.select(cfg, "data.source")),
            "encoder": lambda: featurizer_config(cfg.features, cfg.model, cfg.get("context_size")),
            "configured_layers": lambda: cfg.model.get("num_layers"),
            "store": lambda: {key: plain(cfg.features[key]) for key in STORE_SETTINGS}, "seed": lambda: cfg.seed}


def command_line_overrides() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def refuse_unread_overrides(overrides: list[str], analysis: str | None) -> None:
    """An override of a node that no analysis reads (`trainer.max_epochs=2` beside analysis=neurons, which trains
    for analysis.epochs) would be accepted and do nothing: refused."""
    for line, override in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        node = override.key_or_group.split(".")[0]
        if node in UNREAD_NODES:
            hint = " (its probes train for analysis.epochs)" if analysis == "neurons" else ""
            raise ConfigError(f"{line}: analyze.py reads no `{node}`, which a task's config brings along for probe.py "
                              f"and train.py; analysis={analysis} would ignore it{hint}. Fix: leave it out, and set "
                              "the analysis's own settings (analysis.*)")


def log_results(loggers: list[Logger], config: dict[str, Any], metrics: list[tuple[int, dict[str, float]]]) -> None:
    """Log a finished analysis through the loggers of `logger` (built by `closing_loggers` once the analysis has
    succeeded, and closed by it): the resolved config as hyperparameters, the metrics at their steps."""
    for logger in loggers:
        logger.log_hyperparams(config)
    for step, scalars in metrics:
        for logger in loggers:
            logger.log_metrics(scalars, step=step)


def logged_metrics(analysis: Analysis, results: dict[str, Any]) -> list[tuple[int, dict[str, float]]]:
    """The (step, metrics) of the component's `metrics`, as floats; values that are no numbers (None, flags) left
    out."""
    return [(step, {key: float(value) for key, value in metrics.items() if isinstance(value, (int, float))
                    and not isinstance(value, bool)}) for step, metrics in analysis.metrics(results)]
