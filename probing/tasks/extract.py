"""extract.py: fill the HDF5 feature store of every split of a data set (resumable).

See docs/features.md, 'Several GPUs', and docs/word_tasks.md, 'Features computed elsewhere'.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from lightning.fabric import Fabric
from lightning.fabric.strategies import DDPStrategy
from omegaconf import DictConfig

from probing.config import build, keyed_errors
from probing.data.every_word import EVERY_WORD_DATA, every_word_data
from probing.data.sources import WordInContextData, read_contexts
from probing.data.splits import SPLIT_NAMES
from probing.data.statements import read_statement_task
from probing.data.task_records import SCLASS_KIND, STATEMENT_KIND, TREE_KIND
from probing.data.trees import read_trees
from probing.data.word_tasks import read_word_task
from probing.errors import ConfigError
from probing.features.elmo_export import check_export_folder, export_every_word_stores
from probing.features.featurizers import featurizer_config, featurizer_of
from probing.features.provision import ensure_features
from probing.features.sentence_store import sentence_encoder_of
from probing.features.sharded import SHARD_WAIT, extract_split_sharded
from probing.tasks.distributed import distributed_state_of_this_job, keep_ddp_processes_on_this_job
from probing.tasks.settings import check_config, store_settings, with_data_settings, with_run_folders
from probing.tasks.trainer import check_devices

log = logging.getLogger(__name__)

# The strategies extraction runs under: one process ("auto" with one device), or DDP processes.
STRATEGIES = ("auto", "ddp")


def run(cfg: DictConfig) -> dict[str, Path]:
    check_config(cfg)
    with_run_folders(cfg)
    with_data_settings(cfg)
    splits = requested_splits(cfg.splits)
    check_devices(cfg.trainer)  # in one process too (the encoder on features.device): an impossible trainer is refused
    export_dir = export_folder(cfg.get("export_elmo"), cfg.task, splits)
    if is_single_process(cfg.trainer):
        paths, first_process = extract(cfg, splits), True
    else:
        paths, first_process = extract_in_processes(cfg, splits)
    for split, path in paths.items():
        log.info("%s store: %s", split, path)
    if export_dir is not None and first_process:  # one export, not one per DDP process into the same files
        export_elmo_files(cfg.task, cfg.data, paths, export_dir)
    return paths


def export_folder(folder: str | None, task: DictConfig, splits: list[str]) -> Path | None:
    """`export_elmo`: a folder for the every-word stores in the ELMo HDF5 layout (a word task's only), checked
    before any extraction: created, writable, and holding no file of the user's that the export would replace."""
    if folder is None:
        return None
    if task.get("kind", SCLASS_KIND) in (SCLASS_KIND, STATEMENT_KIND):
        raise ConfigError(f"export_elmo={folder} writes every word of every sentence, which the {task.kind} stores do "
                          "not hold (one row per target). Fix: extract a word task's stores, e.g. task=upos")
    path = Path(str(folder)).expanduser()
    check_export_folder(path, splits, where=f"export_elmo={folder}")
    return path


def export_elmo_files(task: DictConfig, data_config: DictConfig, paths: dict[str, Path], folder: Path) -> None:
    """The splits' every-word stores as one export, `<folder>/<split>.hdf5` in the ELMo layout and the manifest
    beside them (probing.features.elmo_export); `data_config`: the task's `data` (its source and name)."""
    with keyed_errors(data_config.source, "data.source", SOURCE_KEYS):
        data = sentences_of(task, build(data_config.source, "data.source"), data_config.name)
    written = export_every_word_stores({split: (store, data.splits[split].sentences)
                                        for split, store in paths.items()}, folder)
    for split, out in written.items():
        log.info("%s exported in the ELMo HDF5 layout: %s", split, out)


def requested_splits(splits) -> list[str]:
    unknown = [split for split in splits if split not in SPLIT_NAMES]
    if unknown or not splits:
        raise ConfigError(f"splits={list(splits)}: {unknown or 'none'} is not a split of the data. Fix: a non-empty "
                          f"list of {', '.join(SPLIT_NAMES)}, e.g. splits=[train,dev]")
    return list(splits)


def extract(cfg: DictConfig, splits: list[str], fabric: Fabric | None = None) -> dict[str, Path]:
    """Load the data and the featurizer, then fill the stores: in this process alone, or as one of `fabric`'s
    processes (the featurizer on that process's device)."""
    data = task_data(cfg.get("task"), cfg.data)
    on_device = {"device": str(fabric.device)} if fabric is not None else {}
    featurizer = featurizer_of(featurizer_config(cfg.features, cfg.model, cfg.get("context_size"), **on_device))
    if data.name == EVERY_WORD_DATA:
        featurizer = sentence_encoder_of(featurizer)
    if fabric is None:
        return ensure_features(data, featurizer, splits=splits, **store_settings(cfg.features))
    return ensure_features(data, featurizer, splits=splits,
                           extract=functools.partial(extract_split_sharded, fabric=fabric),
                           **store_settings(cfg.features))


# Where the user sets the source that the readers take as their argument `source`: what it refuses while it reads is
# named there.
SOURCE_KEYS = {"source": "data.source"}


def task_data(task: DictConfig | None, data_config: DictConfig) -> WordInContextData:
    """The records to extract: the word-in-context data of the s-class task, one record per text of a statement task,
    or every word of a word task's sentences (the every-word stores that probe.py task=upos, deprel, ... read)."""
    source = build(data_config.source, "data.source")
    with keyed_errors(data_config.source, "data.source", SOURCE_KEYS):
        if task is None or task.get("kind", SCLASS_KIND) == SCLASS_KIND:
            return read_contexts(source)
        if task.get("kind") == STATEMENT_KIND:
            return read_statement_task(source, data_config.name).store_data()
        return every_word_data(sentences_of(task, source, data_config.name))


def sentences_of(task: DictConfig, source: object, data_name: str) -> Any:
    """The split sentences of a word or tree task (their every-word stores are what extract.py fills)."""
    return read_trees(source, data_name) if task.get("kind") == TREE_KIND else read_word_task(source, data_name)


def is_single_process(trainer: DictConfig) -> bool:
    """The default `trainer` (one device, one node, no strategy chosen): extraction as it always ran, no Fabric."""
    return (str(trainer.get("strategy", "auto")) == "auto" and trainer.get("devices", 1) == 1
            and trainer.get("num_nodes", 1) == 1)


def extract_in_processes(cfg: DictConfig, splits: list[str]) -> tuple[dict[str, Path], bool]:
    """Start the processes of `trainer` with Lightning Fabric and extract every split in shards. Every process
    returns here, with the stores and whether it is the first (global rank 0)."""
    fabric = build_fabric(cfg.trainer)
    keep_ddp_processes_on_this_job()
    with distributed_state_of_this_job():
        return fabric.launch(lambda process: extract(cfg, splits, process)), fabric.is_global_zero


def build_fabric(trainer: DictConfig) -> Fabric:
    """A Fabric of `trainer`'s accelerator, devices and nodes under DDP (its devices checked by `run`); refuses what
    extraction cannot honour."""
    strategy = str(trainer.get("strategy", "auto"))
    if strategy not in STRATEGIES:
        raise ConfigError(f"trainer.strategy={strategy}: extraction runs in one process or in DDP processes. "
                          "Fix: trainer=ddp (with trainer.devices=N), or leave `trainer` at its default")
    precision = str(trainer.get("precision", "32-true"))
    if precision not in ("32", "32-true"):
        raise ConfigError(f"trainer.precision={precision} does not set the precision of extraction. "
                          "Fix: trainer.precision=32-true and features.precision=bf16 (or 16 on a GPU)")
    return Fabric(accelerator=trainer.get("accelerator", "auto"), devices=trainer.get("devices", 1),
                  num_nodes=trainer.get("num_nodes", 1), strategy=DDPStrategy(timeout=SHARD_WAIT))
