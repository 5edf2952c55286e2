"""results.json files -> one row per setting: mean ± std over seeds, in the order of Zhao et al. (2020).

A results.json that is not valid JSON, or not the results of a run (another JSON value, an object without `dev`
scores, a score that is not a number, ...), is one DataFormatError naming the file (`check_result`), not a traceback
in the middle of a table. Runs are told apart by their config without where they were written
(`probing.config.location_free`): a folder copied or moved elsewhere holds the same runs; and by the data files they
read (`data_files`: each file's SHA-256), so that runs of one configuration scored on another version of a file (a
test file edited between two launches) are never averaged, nor put in one table (`with_data_versions`).
"""


from __future__ import annotations

import itertools
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from probing.config import location_free
from probing.data.splits import EVAL_SPLITS, SEEN
from probing.errors import DataFormatError
from probing.results import KINDS, migrated
from probing.vocabulary import BASELINE_LABELS, MIX, RAND

RESULTS_FILE = "results.json"
# A row of the table is one setting; runs that differ only in their seed are aggregated (mean ± std). `variant`
# holds any other config value that tells runs of the same setting apart (see `with_variants`).
SETTING_KEYS = ("model", "random_init", "data", "level", "probe", "pooling", "context_size", "variant",
                "representation")
# Columns of the Markdown tables: random_init is shown inside the model name ("minilm (random init)").
DISPLAY_KEYS = tuple(k for k in SETTING_KEYS if k != "random_init")
# The splits of the tables and plots: dev and test. Every split of EVAL_SPLITS is averaged, the seen split too
# (held-out contexts of training words, probe.control_task.seen_fraction > 0).
SPLITS = tuple(split for split in EVAL_SPLITS if split != SEEN)
# Scores averaged over seeds; selectivity = micro_f1 - control_micro_f1 (present when the control task ran).
METRICS = ("micro_f1", "selectivity", "control_micro_f1")
# Zhao et al. (2020) Tables 5/6 put the non-layer baselines first, in this order; None is the slot of the static
# embeddings (GloVe, fastText, ...), which are not known in advance.
BASELINE_ORDER = (RAND, BASELINE_LABELS["prand"], None, BASELINE_LABELS["pstatic"], BASELINE_LABELS["bertw"],
                  BASELINE_LABELS["pbert"])
# Then AVG-l by l, the contextual layers by number, and the scalar mix last.
KIND_ORDER = ("baseline", "avg", "layer", MIX)
# Config nodes made only of other settings (the representation and conditioning of earlier configs, copies of the
# shorthand's values; the probing, chosen by the task; what fills the stores and the fine-tuning module, whose earlier
# configs copied the model's, the features' and the task's settings): a value that differs there differs at its own
# key too.
DERIVED = ("representation.", "probing.", "conditioning", "features.encoder.",
           *(f"finetune.module.{key}" for key in ("name_or_path", "revision", "metric", "attention_window",
                                                  "attention_policy", "isotropy_reg", "isotropy_on_context")))
# ... but for the settings of conf/probe.yaml's `representation`, whose earlier home was the `baselines` menu.
REPRESENTATION_SETTINGS = {"representation.rand_dim": "baselines.prand.dim",
                           "representation.rand_seed": "baselines.prand.seed",
                           "representation.oov_seed": "baselines.pstatic.oov_seed"}
# What the configs of earlier versions held beside: every representation and every probing a run could do
# (`representations`, `probings`), the task's name of its own (`task.probing`), and every baseline's featurizer and
# type-level space (`baselines`, `type_spaces`); their runs compare with later ones without them. (Their
# `conditionings`, every representation a run could condition on, begin as DERIVED's `conditioning` does.)
RETIRED = (("representations",), ("probings",), ("task", "probing"), ("baselines",), ("type_spaces",))
# ... and, in the configs of one job (their `task_name`), what only another job reads: probe.py's earlier configs held
# train.py's settings of the task (conf/finetune/task/ now, composed by train.py alone).
RETIRED_IN_JOB = {"probe": tuple(("task", key) for key in ("batch_size", "lr", "table4_batch_size", "max_length",
                                                           "metric", "monitor"))}
# Names made of other settings (conf/probe.yaml's run_name: model, data, layer, probe, seed) for the run's folder,
# logger and W&B run: they tell runs apart only through those settings, never on their own.
RUN_LABELS = ("run_name", "run_group", "logger.wandb.name", "logger.wandb.group")
# What the tables read from a results.json without a default, checked before any table is made (`check_result`):
# the scores of every run but an analysis's (analyze.py's results name their `analysis` and have no splits), ...
REQUIRED = ("dev",)
# ... the values read into, when present (those of OR_NULL may be null), ...
OBJECTS = (*EVAL_SPLITS, "config", "reused_probes")
OR_NULL = ("config", "reused_probes")
# ... the scores averaged over seeds: probe.py's METRICS in each split, train.py's accuracy and F1 (its dev split)
# and its epochs and duration, a scalar mix's gamma.
SCORES = (*METRICS, "accuracy", "f1")
NUMBERS = ("gamma", "epochs_trained", "duration_s")
RESULTS_FIX = "delete that results.json or rerun its job (probe.py, train.py and analyze.py write it)"
# The setting key that tells apart runs of one table that read other versions of their data files (see
# `with_data_versions`): "" where all read the same.
DATA_VERSION = "data_version"
NOT_RECORDED = "data files not recorded"
DIGEST_SHOWN = 8  # hex digits of a file's SHA-256 shown in a version's label


def find_results(folder: Path) -> list[dict[str, Any]]:
    """Every results.json below `folder`, each with the file it came from, read as the current schema version holds
    it (`probing.results.migrated`); one that is not the results of a run, or of a kind this version does not know,
    is refused (see `check_result`). The bare NaN and Infinity tokens of results written before results.json was
    strict JSON are read as null: an undefined score, as it is recorded now."""
    results = []
    for path in sorted(Path(folder).rglob(RESULTS_FILE)):
        try:
            record = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda _: None)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, error.lineno, f"not valid JSON ({error.msg})",
                                  "delete the file (the run did not finish) or re-run that job") from error
        check_result(record, path)
        record = migrated(record)
        if record["kind"] not in KINDS:
            raise DataFormatError(path, None, f"its kind {record['kind']!r} is none that this version of the report "
                                  f"knows ({', '.join(KINDS)})", RESULTS_FIX)
        record["_file"] = str(path)
        results.append(record)
    return results


def is_kind(result: dict[str, Any], kind: str) -> bool:
    """Whether `result`, of any schema version (`probing.results.migrated`), is of `kind`: what selects a section's
    runs."""
    return migrated(result)["kind"] == kind


def check_result(record: Any, path: Path) -> None:
    """Refuse (one DataFormatError naming `path`) a results.json that is valid JSON but not the results of a run,
    or lacks what the tables read from it: REQUIRED, OBJECTS, SCORES and NUMBERS of their JSON types."""
    def refuse(problem: str) -> None:
        raise DataFormatError(path, None, problem, RESULTS_FIX)

    if not isinstance(record, dict):
        refuse(f"it holds {json_type(record)}, not the results of a run (an object with its scores and config)")
    missing = [key for key in REQUIRED if key not in record]
    if missing and "analysis" not in record:
        refuse(f"it has no {', '.join(f'`{key}`' for key in missing)} scores, which every probe.py and train.py run "
               "records")
    for key in OBJECTS:
        value = record.get(key, {})
        if not isinstance(value, dict) and not (value is None and key in OR_NULL):
            refuse(f"its `{key}` is {json_type(value)}, not an object")
    if not isinstance(record.get("representation") or "", str):
        refuse(f"its `representation` is {json_type(record['representation'])}, not a name")
    if not isinstance(record.get("mix_weights") or [], list):
        refuse(f"its `mix_weights` is {json_type(record['mix_weights'])}, not a list of numbers")
    numbers = [(f"{split}.{key}", record[split].get(key)) for split in EVAL_SPLITS if split in record for key in SCORES]
    numbers += [(key, record.get(key)) for key in NUMBERS]
    numbers += [(f"mix_weights[{index}]", weight) for index, weight in enumerate(record.get("mix_weights") or [])]
    for name, value in numbers:
        if value is not None and not is_number(value):
            refuse(f"its `{name}` is {json_type(value)}, not a number")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_type(value: Any) -> str:
    """How a JSON value is named in a refusal: "a list", "the string "abc"", "null"."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    text = json.dumps(value)
    shown = text if len(text) <= 40 else f"{text[:40]}..."
    return "null" if value is None else f"the {'string' if isinstance(value, str) else 'value'} {shown}"


def require(result: dict[str, Any], keys: Iterable[str], section: str) -> None:
    """Refuse a result (one DataFormatError naming its file) that lacks one of `keys`, which the report's section
    headed `section` reads."""
    missing = [key for key in keys if result.get(key) is None]
    if missing:
        raise DataFormatError(result["_file"], None, f"it has no {', '.join(f'`{key}`' for key in missing)}, which "
                              f"the report's section \"{section}\" reads", RESULTS_FIX)


def with_defaults(result: dict[str, Any]) -> dict[str, Any]:
    """Fill the keys that results written before baselines and controls existed lack: those runs all probed one
    layer of a pretrained encoder in context, so representation = the layer, level = context, random_init = False."""
    return {"level": "context", "random_init": False, **result,
            "representation": result.get("representation") or str(result.get("layer"))}


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
    return config_values(location_free(result.get("config") or {}))


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
    if (result.get("config") or {}).get("baseline") is not None:
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
    if not result.get("config"):  # results written before configs were recorded: only the file tells them apart
        return result["_file"]
    return json.dumps([compared_values(result), data_digests(result)], sort_keys=True, default=str)


def data_digests(result: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(file name, SHA-256) of each data file the run read, sorted (results.json's `data_files`: the names without
    their folders, so that a moved data folder holds the same files); None for results written before runs recorded
    them. An entry that is not a [file, hash] pair is left out."""
    entries = result.get("data_files")
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


def with_variants(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each result (with its defaults filled) gains `variant`: the config values that set it apart from runs of the
    same setting ("probe.mix.lr=0.1"), so that a sweep over a hyper-parameter is never averaged as if it were seeds,
    and its data version where runs of its setting read other versions of their data files (`with_data_versions`)."""
    records = [with_defaults(r) for r in results]
    base_keys = [k for k in SETTING_KEYS if k != "variant"]
    with_data_versions(records, [k for k in base_keys if k != "representation"])  # the runs of one table
    for runs in group_by(records, [*base_keys, DATA_VERSION]).values():
        keys = variant_keys(runs)
        for run in runs:
            run["variant"] = variant_label(run, keys)
    return records


def variant_label(run: dict[str, Any], keys: Iterable[str]) -> str:
    """"probe.mix.lr=0.1": the run's config values of `keys`, then its data version where it has one."""
    values = config_values(run.get("config") or {})
    return ", ".join([*(f"{key}={values.get(key)}" for key in keys), *filter(None, [run.get(DATA_VERSION)])])


def representation_layer(name: str) -> int | None:
    """The layer index of a layer ("3") or of a type-level layer average ("AVG-3"); None otherwise."""
    match = re.fullmatch(r"(?:AVG-)?(\d+)", name)
    return int(match.group(1)) if match else None


def representation_kind(name: str) -> str:
    """"layer", "avg" (AVG-l), "mix" (scalar mix) or "baseline" (Rand, P-BERT, GloVe, ...)."""
    if name == MIX:
        return MIX
    if representation_layer(name) is None:
        return "baseline"
    return "avg" if name.startswith("AVG-") else "layer"


def representation_sort_key(name: str) -> tuple:
    """Zhao et al.'s column order: Rand, P-Rand, static names, P-static (P-<file>, e.g. P-GloVe), BERTw, P-BERT,
    AVG-l, layers, mix."""
    kind = representation_kind(name)
    if kind == "baseline":
        slot = name if name in BASELINE_ORDER else BASELINE_LABELS["pstatic"] if name.startswith("P-") else None
        return (0, BASELINE_ORDER.index(slot), name.lower())
    return (KIND_ORDER.index(kind), representation_layer(name) or 0, "")


def of_kind(records: Iterable[dict], *kinds: str) -> list[dict]:
    """The records whose representation is of one of `kinds` (see representation_kind)."""
    return [r for r in records if representation_kind(r["representation"]) in kinds]


def value_sort_key(value: Any) -> tuple:
    """Numbers numerically, then strings, then None last (context_size None is the whole sentence: "all")."""
    if value is None:
        return (2, 0, "")
    if isinstance(value, (int, float)):
        return (0, value, "")
    return (1, 0, str(value))


def _row_sort_key(row: dict) -> tuple:
    return tuple(representation_sort_key(row[k]) if k == "representation" else value_sort_key(row[k])
                 for k in SETTING_KEYS)


def group_by(records: Iterable[dict], keys: Iterable[str]) -> dict[tuple, list[dict]]:
    """Records with equal values of `keys`, in first-seen order."""
    keys = tuple(keys)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        groups[tuple(record.get(k) for k in keys)].append(record)
    return groups


def mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample std of the values present; std is None for fewer than two (no spread to report)."""
    present = [v for v in values if v is not None]
    mean = statistics.fmean(present) if present else None
    return mean, statistics.stdev(present) if len(present) > 1 else None


def mean_mix_weights(runs: Iterable[dict[str, Any]]) -> list[float] | None:
    """The scalar mix's weights averaged over the runs that learned one, layer by layer (None if none did)."""
    weights = [run["mix_weights"] for run in runs if run.get("mix_weights")]
    return [mean_std(column)[0] for column in zip(*weights)] if weights else None


def _aggregate_mix(runs: list[dict]) -> dict[str, Any]:
    """Mean (std) over seeds of each softmax-normalised mix weight and of gamma, for scalar-mix runs."""
    weights = [r["mix_weights"] for r in runs if r.get("mix_weights")]
    if not weights:
        return {"mix_weights": None, "mix_weights_std": None, "gamma": None, "gamma_std": None}
    per_layer = [mean_std(column) for column in zip(*weights)]
    gamma, gamma_std = mean_std(r.get("gamma") for r in runs)
    return {"mix_weights": [m for m, _ in per_layer], "mix_weights_std": [s or 0.0 for _, s in per_layer],
            "gamma": gamma, "gamma_std": gamma_std}


def _aggregate_setting(key: tuple, runs: list[dict]) -> dict[str, Any]:
    row = dict(zip(SETTING_KEYS, key))
    row["layer"] = runs[0].get("layer")
    row["seeds"] = sorted((r.get("seed") for r in runs), key=value_sort_key)
    for split, metric in itertools.product(EVAL_SPLITS, METRICS):
        row[f"{split}_{metric}"], row[f"{split}_{metric}_std"] = mean_std(r.get(split, {}).get(metric) for r in runs)
    test = runs[0].get("test", {})
    row["test_combinations"] = test.get("n_combinations")
    row["test_contexts"] = test.get("n_contexts")
    return {**row, **_aggregate_mix(runs)}


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting with mean/std over seeds of the scores, sorted by setting (representations in the
    paper's order, context size "all" last)."""
    groups = group_by(with_variants(results), SETTING_KEYS)
    return sorted((_aggregate_setting(key, runs) for key, runs in groups.items()), key=_row_sort_key)
