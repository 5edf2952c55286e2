"""probe.py: one pipeline for every kind of probing: build the task's probing and representation, fill or
reuse their stores, fit the probe module (or score saved probes), score dev and test, write results.json.

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf, open_dict

from probing.config import build, keyed_errors
from probing.data.splits import EVAL_SPLITS
from probing.features.featurizers import featurizer_config
from probing.features.finetuned import finetuned_task, setup_model, setup_reuse
from probing.features.identity import FeatureIdentity
from probing.probes.bits import information
from probing.probes.bits import mdl as online_code
from probing.probes.representation_choice import RepresentationChoice
from probing.probes.representations import ProbeInputs
from probing.probes.task_probes import TaskProbing, check_probing_task
from probing.tasks.loggers import closing_loggers, name_the_run, summarise_in_wandb
from probing.tasks.online_probe import online_probe, with_online_layers
from probing.tasks.results_file import running_job, write_results
from probing.tasks.settings import check_config, store_settings, with_data_settings, with_run_folders
from probing.tasks.trainer import build_trainer, check_trainer, note_precision

log = logging.getLogger(__name__)

# The probe's settings (conf/probe/) that every task's probing takes as they are.
PROBE_SETTINGS = ("mix", "mdl", "mdl_fractions", "batch_size", "level", "reuse", "pair_product", "condition_on",
                  "eval_on")
# Where the user sets each argument that probe.py passes the probing: what the probing refuses (built, or while it
# runs) is named there.
PROBING_KEYS = {**{key: f"probe.{key}" for key in PROBE_SETTINGS}, "name": "task.name", "source": "data.source",
                "seed": "seed", "erase": "erase", "family": "probe.module", "control": "probe.control_task"}


def run(cfg: DictConfig) -> dict[str, Any]:
    """Probe the representation of `layer=`/`baseline=` on the task of `task=`, write and return results.json; bad
    settings are refused before any model loads or store fills."""
    check_config(cfg)
    with_run_folders(cfg)
    with_data_settings(cfg)
    with_the_compared_setup(cfg)
    online = bool(cfg.probe.get("online", False))  # probe.online=true: no store, no representation to choose
    if online:
        with_online_layers(cfg)
    representation = None if online else chosen_representation(cfg)
    name_the_run(cfg, *run_name(cfg))
    with running_job(cfg) as (out, config, previous):
        if previous is not None:
            return previous
        check_trainer(cfg.trainer)
        check_probing_task(cfg.task.name, cfg.get("probing"))
        probing = built_probing(cfg)
        with closing_loggers(cfg.get("logger")) as loggers, keyed_errors(cfg.probing, "probing", PROBING_KEYS):
            results = online_probe(cfg, probing, config, loggers) if online else \
                probe(cfg, probing, representation, config, out.parent, loggers)
        results = write_results(out, results, probing.RESULTS_KIND)
    log.info("%s", summary_line(results, out))
    return results


def run_name(cfg: DictConfig) -> tuple[str, str]:
    """The name and group of the run in W&B: model-data-layer<layer>-probe-seed<seed>, model-data."""
    group = f"{cfg.model.name}-{cfg.data.name}"
    return f"{group}-layer{cfg.layer}-{cfg.probe.name}-seed{cfg.seed}", group


def built_probing(cfg: DictConfig) -> TaskProbing:
    """The task's probing (conf/probings/<task>.yaml) built with what this run knows: the task's name and data source,
    the seed, the erasure and the probe's settings (conf/probe/; `probe.module` builds the probe family)."""
    probe = cfg.probe
    settings = {key: OmegaConf.to_container(probe[key], resolve=True) if OmegaConf.is_config(probe[key]) else probe[key]
                for key in PROBE_SETTINGS}
    # each part built at its own key, so that a refused setting is named where the user sets it; the built parts are
    # handed to the probing as they are (through its partial: instantiate would turn a dataclass into a dict)
    erase = build(cfg.erase, "erase") if cfg.get("erase") is not None else None
    family = build(probe.module, "probe.module")
    control = build(probe.control_task, "probe.control_task")
    source = build(cfg.data.source, "data.source")
    make = build(cfg.probing, "probing", _partial_=True, settings_from=PROBING_KEYS)
    return make(name=cfg.task.name, source=source, seed=cfg.seed, erase=erase, family=family, control=control,
                **settings)


def with_the_compared_setup(cfg: DictConfig) -> None:
    """The fine-tuned comparison (experiment=zhao2020_fig6): the encoder of this job's `comparison_setup` (the
    pretrained model, or the fine-tuned model its label names) and, for setup (a), the pretrained probes of the sweep
    to score (its `pretrained/` folder), set before the config is recorded; a `probe.reuse` set on the command line is
    kept."""
    setup = cfg.get("comparison_setup")
    if setup is None:
        return
    with open_dict(cfg):
        cfg.features.encoder.name_or_path = setup_model(setup, cfg.finetuned, cfg.model.name_or_path)
        if cfg.probe.get("reuse") is None:
            cfg.probe.reuse = setup_reuse(setup, HydraConfig.get().sweep.dir)


def probe(cfg: DictConfig, probing: TaskProbing, representation: RepresentationChoice, config: dict[str, Any],
          run_dir: Path, loggers: list[Logger]) -> dict[str, Any]:
    """Build, fit, score: the representation's inputs, the probes (new or saved: built before the loggers start, so
    that a bad setting starts no run), the Trainer, the fit, dev and test; the run's results."""
    started = time.time()
    L.seed_everything(cfg.seed, workers=True)
    probing.load()  # the task's data before the model: what the data cannot serve is refused first
    inputs = probing.inputs(representation(), store_settings(cfg.features))
    module = probing.build_module(inputs)
    trainer = build_trainer(cfg, probing.keepers(inputs), loggers=loggers)
    note_precision(str(trainer.precision), trainer.strategy.root_device)
    for logger in trainer.loggers:  # the whole resolved config, so runs can be filtered by layer, model, data...
        logger.log_hyperparams({**config, "representation": inputs.about["representation"]})
    outcome = probing.fit(trainer, module, inputs, run_dir)
    trainer.validate(module, datamodule=inputs.datamodule, verbose=False)
    trainer.test(module, datamodule=inputs.datamodule, verbose=False)
    results = {**about_run(cfg, probing, module, inputs), **probing.results(module, inputs),
               **{split: module.split_metrics[split] for split in EVAL_SPLITS if split in module.split_metrics},
               **module.mix_summary(), **outcome, "warnings": [*outcome["warnings"], *module.score_warnings],
               "epochs_trained": trainer.current_epoch}
    if module.MEASURES_BITS:
        results["bits"] = information.record(module, inputs.datamodule.splits, inputs.about.get("conditioned_on"))
    if probing.online_code is not None:
        results["mdl"] = probing.online_code.codelength(module, inputs.datamodule)
    results |= {"duration_s": round(time.time() - started, 2), "config": config}
    summarise_in_wandb(trainer.loggers, headline_scores(results, module.SCORES))
    return results


def chosen_representation(cfg: DictConfig) -> RepresentationChoice:
    """The representation that `layer=`, `baseline=`, `probe.level` and `embeddings=` name, and the one of
    `probe.condition_on`: decided and checked from those values, nothing loaded yet (built when called)."""
    return build(cfg.representation, "representation", _recursive_=False, layer=cfg.layer, baseline=cfg.baseline,
                 level=cfg.probe.level, embeddings=cfg.get("embeddings"), condition_on=cfg.probe.condition_on,
                 encoder=featurizer_config(cfg.features, cfg.model, cfg.context_size), context_size=cfg.context_size,
                 configured_layers=cfg.model.get("num_layers"), settings_from=REPRESENTATION_KEYS)


# Where the user sets the representation's arguments that probe.py passes.
REPRESENTATION_KEYS = {"layer": "layer", "baseline": "baseline", "level": "probe.level", "embeddings": "embeddings",
                       "condition_on": "probe.condition_on", "context_size": "context_size",
                       "configured_layers": "model.num_layers"}


def about_run(cfg: DictConfig, probing: TaskProbing, module: Any, inputs: ProbeInputs) -> dict[str, Any]:
    """What every probe run records of what it probed: the task and probe, the model and features, the data."""
    features = inputs.features
    settings = module.settings()
    return {"task": probing.name, "probe": cfg.probe.name, "probe_family": settings["family"],
            "rank": settings["rank"], "model": cfg.model.name,
            "finetuned_task": finetuned_task(features["model_name_or_path"]),
            "random_init": bool(cfg.model.get("random_init", False)), "data": cfg.data.name, "level": inputs.level,
            "embeddings": None, **{key: features[key] for key in FeatureIdentity.of_the_featurizer()}, **inputs.about,
            "seed": cfg.seed, "control_seed": probing.control.seed}


def headline_scores(results: dict[str, Any], scores: tuple[str, ...]) -> dict[str, Any]:
    """What W&B's summary of the run shows: `<split>/final_<score>` of the module's scores, `mdl/...`, the
    representation and the best epoch."""
    return {f"{split}/final_{key}": results[split][key] for split in EVAL_SPLITS if split in results
            for key in scores if key in results[split]} | online_code.scores(results) | information.scores(results) | {
        "representation": results["representation"], "best_epoch": results.get("best_epoch")}


# The headline score of each kind of probe module (the first of its SCORES) and how a log line names it.
HEADLINES = {"micro_f1": "micro-F1", "accuracy": "accuracy", "uuas": "UUAS", "root_acc": "Root accuracy"}


def summary_line(results: dict[str, Any], out: Path) -> str:
    """'upos linear 4: dev accuracy 0.911, test accuracy 0.905 (test selectivity +0.380) -> <results.json>'."""
    score = next(key for key in HEADLINES if key in results["dev"])
    name, test = HEADLINES[score], results["test"]
    selectivity = next((test[key] for key in ("selectivity", f"selectivity_{score}") if key in test), None)
    selectivity_note = f" (test selectivity {selectivity:+.3f})" if selectivity is not None else ""
    return (f"{results['task']} {results['probe_family']} {results['representation']}: dev {name} "
            f"{score_text(results['dev'][score])}, test {name} {score_text(test[score])}{selectivity_note}"
            f"{information.describe(results)}{online_code.describe(results)} -> {out}")


def score_text(value: float | None) -> str:
    """"0.905", or "undefined" for a null score (the run's warnings say why)."""
    return "undefined" if value is None else f"{value:.3f}"
