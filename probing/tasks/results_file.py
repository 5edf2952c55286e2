"""results.json and the run folder: the folder locked while a job runs in it, results written atomically (stamped
and checked against their kind's schema), and a finished job found again and not run again, unless its inputs changed
since; results of another configuration are never overwritten."""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from probing.cli import process_rank
from probing.config import same_run
from probing.data.files import write_json_atomically
from probing.data.text import data_files_read, forget_data_files, sha256_file
from probing.errors import ConfigError
from probing.features.hf_models import forget_local_models, local_models_loaded, local_weights_sha256
from probing.locks import holding, open_lock_file
from probing.report.aggregate import RESULTS_FILE, json_type
from probing.results import migrated, stamped

log = logging.getLogger(__name__)

RUN_LOCK = "job.lock"  # in the run folder, held by the job running there (`run_folder_lock`)


def finished_results(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The results.json at `path` if an earlier job wrote it for exactly this configuration, wherever its folder
    was then (a run or sweep folder moved and relaunched into its new place is still finished: see
    `probing.config.location_free`), read as the current schema version holds it (`probing.results.migrated`: results
    written before the schema); None if there is none (or a damaged one, which is run again). Results of another
    configuration, and a file that holds no run's results, are never overwritten: refused."""
    if not path.is_file():
        return None
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        log.warning("%s is damaged (its job was stopped while writing it); running the job again", path)
        return None
    if not isinstance(previous, dict):
        raise ConfigError(f"{path} holds {json_type(previous)}, not the results of a run, and this job would "
                          "overwrite it. Fix: run into a new folder (hydra.run.dir=... or hydra.sweep.dir=...), "
                          "or delete that results.json")
    if same_run(previous.get("config"), config):
        check_inputs_unchanged(path, previous)
        return migrated(previous)
    raise ConfigError(f"{path} holds the results of another configuration, which this job would overwrite. Fix: run "
                      "into a new folder (hydra.run.dir=... or hydra.sweep.dir=...), or delete that results.json")


def check_inputs_unchanged(path: Path, previous: dict[str, Any]) -> None:
    """The data files and local model folders that the results at `path` were computed from (`data_files`: [file,
    SHA-256] pairs; `model_weights`: [folder, weights_sha256] pairs), as they are now: a file changed since (a task's
    JSONL edited in place, a model's weights or task.json replaced) would have the job return results of other inputs.
    One no longer there is not checked (a run folder moved with its data refers to the old place)."""
    for file, digest in recorded_pairs(previous.get("data_files")):
        if Path(file).is_file() and sha256_file(file) != digest:
            raise ConfigError(changed_since(path, file, "that file has changed since"))
    for folder, digest in recorded_pairs(previous.get("model_weights")):
        if Path(folder).is_dir() and local_weights_sha256(folder) != digest:
            raise ConfigError(changed_since(path, f"the model {folder}", "its weights have changed since"))


def recorded_pairs(entries: Any) -> list[list[str]]:
    """The [name, SHA-256] pairs of a results.json entry; anything else in it is left unchecked."""
    return [entry for entry in entries if isinstance(entry, list) and len(entry) == 2
            and all(isinstance(part, str) for part in entry)] if isinstance(entries, list) else []


def changed_since(path: Path, source: str, change: str) -> str:
    return (f"{path} holds the results of this configuration computed from {source} as it was then, and {change}. "
            "Fix: run into a new folder (hydra.run.dir=... or hydra.sweep.dir=...), or delete the run folder "
            f"{path.parent} to run it again")


def write_results(out: Path, results: dict[str, Any], kind: str) -> dict[str, Any]:
    """results.json of a job, its results of `kind` stamped with the schema version, the job and the kind and checked
    against the kind's schema (`probing.results.stamped`), with `data_files`: every data file the job read and its
    SHA-256, and `model_weights`: every local model folder it loaded and its weights_sha256 (checked by
    `check_inputs_unchanged` before the results are returned again). Strict JSON: a number that is not finite (NaN,
    which JSON has no word for) is recorded as null, with a warning in the log and in the results' warnings. Returns
    what was written."""
    results["data_files"] = [[file, sha256_file(file)] for file in data_files_read() if Path(file).is_file()]
    results["model_weights"] = local_models_loaded()
    for name in nulled_non_finite(results):
        warning = f"`{name}` was not a finite number: recorded as null"
        log.warning("%s", warning)
        results.setdefault("warnings", []).append(warning)
    record = stamped(results, kind)
    write_json_atomically(out, record)
    return record


@contextlib.contextmanager
def running_job(cfg: DictConfig) -> Iterator[tuple[Path, dict[str, Any], dict[str, Any] | None]]:
    """`job_state`, with the run folder locked for the whole job (`run_folder_lock`)."""
    with run_folder_lock(Path(cfg.paths.output_dir)):
        yield job_state(cfg)


@contextlib.contextmanager
def run_folder_lock(folder: Path) -> Iterator[None]:
    """Hold `<folder>/job.lock` (a `probing.locks` lock) while the job runs: a second launch into the folder is
    refused before it does anything (it would train beside the first, then fail in the CSV log that the first is
    writing, which loses rows). The other processes of a DDP job take none: the lock of rank 0 covers them."""
    if process_rank() != 0:
        yield
        return

    def refused(holder: str) -> ConfigError:
        return ConfigError(f"{folder}: another job (pid {holder}) is running in this run folder. Fix: wait for it "
                           "to finish (a relaunch then skips or resumes it), or run into a new folder "
                           "(hydra.run.dir=... or hydra.sweep.dir=...)")

    with holding(open_lock_file(folder / RUN_LOCK), refused):
        yield


def nulled_non_finite(value: Any, where: str = "") -> list[str]:
    """Replace, in place, every float of `value` (nested dicts and lists) that is not finite by None; the names of
    those replaced ("test.uuas", "mix_weights[2]")."""
    if isinstance(value, dict):
        items = [(key, f"{where}.{key}" if where else str(key)) for key in value]
    elif isinstance(value, list):
        items = [(index, f"{where}[{index}]") for index in range(len(value))]
    else:
        return []
    replaced = []
    for key, name in items:
        if isinstance(value[key], float) and not math.isfinite(value[key]):
            value[key] = None
            replaced.append(name)
        else:
            replaced += nulled_non_finite(value[key], name)
    return replaced


def job_state(cfg: DictConfig) -> tuple[Path, dict[str, Any], dict[str, Any] | None]:
    """(where the job's results.json goes, the resolved config, the results of an earlier job of this same
    configuration there or None, also when the folder was moved since); a finished job is not run again."""
    forget_data_files()  # the jobs of a multirun share one process: this job's inputs are recorded from here
    forget_local_models()
    out = Path(cfg.paths.output_dir) / RESULTS_FILE
    config = OmegaConf.to_container(cfg, resolve=True)
    previous = finished_results(out, config)
    if previous is not None:
        log.info("%s already holds the results of this configuration; not running it again (delete it to rerun)", out)
    return out, config, previous
