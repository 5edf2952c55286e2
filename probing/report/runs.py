"""Which results.json files are one run, and what tells runs of one setting apart.

Runs are told apart by their config without where they were written (`probing.config.location_free`): a folder
copied or moved elsewhere holds the same runs; and by the data files they read (`data_files`: each file's SHA-256),
so that runs of one configuration scored on another version of a file (a test file edited between two launches) are
never averaged, nor put in one table (`with_data_versions`). A config value that differs among runs of one setting
other than by seed is a variant of it (`variant_keys`), never a repeat.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from probing.config import location_free
from probing.results import load

# Config nodes made only of other settings (the representation and conditioning of earlier configs, copies of the
# shorthand's values; the probing, chosen by the task; what fills the stores and the fine-tuning module, whose earlier
# configs copied the model's, the features' and the task's settings; the factory of the probe family, chosen by
# probe=): a value that differs there differs at its own key too.
DERIVED = ("representation.", "probing.", "conditioning", "features.encoder.", "probe.module._target_",
           *(f"finetune.module.{key}" for key in ("name_or_path", "revision", "metric", "attention_window",
                                                  "attention_policy", "isotropy_reg", "isotropy_on_context")))
# ... but for the settings of conf/probe.yaml's `representation`, whose earlier home was the `baselines` menu.
REPRESENTATION_SETTINGS = {"representation.rand_dim": "baselines.prand.dim",
                           "representation.rand_seed": "baselines.prand.seed",
                           "representation.oov_seed": "baselines.pstatic.oov_seed"}
# What the configs of earlier versions held beside: every representation and every probing a run could do
# (`representations`, `probings`), the task's name of its own (`task.probing`), and every baseline's featurizer and
# type-level space (`baselines`, `type_spaces`); their runs compare with later ones without them. (Their
# `conditionings`, every representation a run could condition on, begin as DERIVED's `conditioning` does.) So did the
# copies of the probe's settings that its probe family and online code read (`probe.family`, `probe.module.family`,
# `probe.module.mix`, `probe.online_code`, `probe.control_task.level`, `task.probe_family`), which probe.py now passes
# when it builds them.
RETIRED = (("representations",), ("probings",), ("task", "probing"), ("baselines",), ("type_spaces",),
           ("probe", "family"), ("probe", "module", "family"), ("probe", "module", "mix"), ("probe", "online_code"),
           ("probe", "control_task", "level"), ("task", "probe_family"))
# ... and, in the configs of one job (their `task_name`), what only another job reads: probe.py's earlier configs held
# train.py's settings of the task (conf/finetune/task/ now, composed by train.py alone).
RETIRED_IN_JOB = {"probe": tuple(("task", key) for key in ("batch_size", "lr", "table4_batch_size", "max_length",
                                                           "metric", "monitor"))}
# Names made of other settings (conf/probe.yaml's run_name: model, data, layer, probe, seed) for the run's folder,
# logger and W&B run: they tell runs apart only through those settings, never on their own.
RUN_LABELS = ("run_name", "run_group", "logger.wandb.name", "logger.wandb.group")
# The setting key that tells apart runs of one table that read other versions of their data files (see
# `with_data_versions`): "" where all read the same.
DATA_VERSION = "data_version"
NOT_RECORDED = "data files not recorded"
DIGEST_SHOWN = 8  # hex digits of a file's SHA-256 shown in a version's label


def config_values(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as {"probe.mix.lr": 0.001, ...}."""
    values = {}
    for key, value in config.items():
        if isinstance(value, dict):
            values |= config_values(value, f"{prefix}{key}.")
        else:
            values[f"{prefix}{key}"] = value
    return values



def located_values(result: dict[str, Any]) -> dict[str, Any]:
    """The run's config values without where it was launched and written (`probing.config.location_free`)."""
    return config_values(location_free(load(result).config or {}))



def compared_values(result: dict[str, Any]) -> dict[str, Any]:
    """The config values that make the run what it computed: `located_values` without the copies of other settings
    (DERIVED; the settings of the representation read at their key of today, REPRESENTATION_SETTINGS), what earlier
    versions' configs held beside (RETIRED), null values (a key that a config lacks is null there: earlier configs
    held settings that later ones leave to an experiment, `finetuned`), the names made of other settings (RUN_LABELS)
    and, where a baseline was probed (`baseline=bertw`), the layer= that it does not read (a sweep `layer=0,3
    baseline=null,bertw` runs the same baseline once per layer)."""
    located = located_values(result)
    for key, earlier in REPRESENTATION_SETTINGS.items():
        if key not in located and earlier in located:
            located[key] = located[earlier]
    job = located.get("task_name")
    values = {key: value for key, value in located.items() if key not in RUN_LABELS and not retired(key, job)
              and (key in REPRESENTATION_SETTINGS or not key.startswith(DERIVED)) and value is not None}
    if (load(result).config or {}).get("baseline") is not None:
        values.pop("layer", None)
    return values


def retired(key: str, job: str | None = None) -> bool:
    """Whether a config value's key is at or below one of RETIRED (or of RETIRED_IN_JOB for the config's `job`)."""
    path = tuple(key.split("."))
    return any(path[:len(node)] == node for node in (*RETIRED, *RETIRED_IN_JOB.get(job, ())))


def run_identity(result: dict[str, Any]) -> str:
    """What makes a run itself: its config (seed included) without where it was written (`compared_values`), and the
    versions of the data files it read (`data_digests`). Two results.json files with the same identity are one run
    found twice (a copied folder, or a baseline run once per layer of a sweep), never two seeds, nor a run relaunched
    on an edited data file."""
    if not load(result).config:  # results written before configs were recorded: only the file tells them apart
        return result["_file"]
    return json.dumps([compared_values(result), data_digests(result)], sort_keys=True, default=str)



def data_digests(result: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(file name, SHA-256) of each data file the run read, sorted (results.json's `data_files`: the names without
    their folders, so that a moved data folder holds the same files); None for results written before runs recorded
    them. An entry that is not a [file, hash] pair is left out."""
    entries = load(result).data_files
    if not isinstance(entries, list):
        return None
    return sorted({(Path(entry[0]).name, entry[1]) for entry in entries
                   if isinstance(entry, list) and len(entry) == 2 and all(isinstance(part, str) for part in entry)})



def with_data_versions(records: list[dict[str, Any]], table_keys: Iterable[str]) -> None:
    """Set each record's DATA_VERSION: "" where the runs of its table (equal in `table_keys`) read the same data files
    (or recorded none), else the label of its own version, the files that differ among the table's versions with the
    first digits of their hashes ("en_ewt-ud-test.conllu sha256 3fa1c2d0"; NOT_RECORDED for results without a
    record), so that the table is split into one per version."""
    for runs in group_by(records, table_keys).values():
        versions = [data_digests(run) for run in runs]
        recorded = [version for version in versions if version is not None]
        if len({tuple(version) for version in recorded}) < 2:
            for run in runs:
                run[DATA_VERSION] = ""
            continue
        shared = set.intersection(*(set(version) for version in recorded))
        names = {name for version in recorded for name, _ in version}
        for run, version in zip(runs, versions):
            run[DATA_VERSION] = NOT_RECORDED if version is None else version_label(version, shared, names)



def version_label(version: list[tuple[str, str]], shared: set[tuple[str, str]], names: set[str]) -> str:
    """The files of `version` that not every version of its table shares, "name sha256 <first digits>", and "no
    name" for a file that other versions read and this one did not."""
    own = [f"{name} sha256 {digest[:DIGEST_SHOWN]}" for name, digest in version if (name, digest) not in shared]
    return ", ".join([*own, *(f"no {name}" for name in sorted(names - {name for name, _ in version}))])



def data_version_notes(version: str, what: str) -> list[str]:
    """The line under a table of one data version saying why its runs have a table of their own (`what`: what else
    it has of its own); none for a table that was not split."""
    if not version:
        return []
    read = "did not record the data files they read" if version == NOT_RECORDED else f"read {version}"
    return [f"These runs {read}; other runs of this setting read another version of their data files (the SHA-256 of "
            f"each file in results.json's `data_files`), so they do not score the same sentences: a table each, "
            f"{what}."]



def distinct_runs(results: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The results with every run counted once (the first file found), and the files left out as repeats."""
    seen: set[str] = set()
    kept, repeats = [], []
    for result in results:
        identity = run_identity(result)
        if identity in seen:
            repeats.append(result["_file"])
        else:
            kept.append(result)
            seen.add(identity)
    return kept, repeats



def run_seed(result: dict[str, Any]) -> Any:
    """The run's seed: results.json's own `seed`, else its config's (train.py records it only there)."""
    return result["seed"] if "seed" in result else (result.get("config") or {}).get("seed")



def variant_keys(runs: list[dict[str, Any]]) -> list[str]:
    """Config keys whose values differ among runs of one setting, apart from the seed, where the runs were written,
    values that follow from the seed (the control task's seed), the run's names (RUN_LABELS), a baseline's unread
    layer= and the copies of other settings that the probed representation holds (DERIVED)."""
    columns = differing_values(runs)
    columns.pop("seed", None)
    seeds = [json.dumps(run_seed(r)) for r in runs]
    return sorted(key for key, column in columns.items() if len(set(zip(seeds, column))) > len(set(seeds)))



def differing_values(runs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """{key: each run's value as JSON} of the `compared_values` keys whose values are not the same in every run."""
    configs = [{key: json.dumps(value, sort_keys=True, default=str) for key, value in compared_values(r).items()}
               for r in runs]
    columns = {key: [config.get(key) for config in configs] for key in set().union(*configs)}
    return {key: column for key, column in columns.items() if len(set(column)) > 1}



def group_by(records: Iterable[dict], keys: Iterable[str]) -> dict[tuple, list[dict]]:
    """Records with equal values of `keys`, in first-seen order."""
    keys = tuple(keys)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        groups[tuple(record.get(k) for k in keys)].append(record)
    return groups

