"""results.json files -> one row per setting: mean ± std over seeds, in the order of Zhao et al. (2020).

A results.json that is not valid JSON, or not the results of a run (another JSON value, an object without `dev`
scores, a score that is not a number, ...), is one DataFormatError naming the file (`check_result`), not a traceback
in the middle of a table. Which files are one run and what tells runs of one setting apart (their config, the
versions of their data files) is `probing.report.runs`.
"""


from __future__ import annotations

import itertools
import json
import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from probing.data.splits import EVAL_SPLITS, SEEN
from probing.errors import DataFormatError
from probing.report.runs import DATA_VERSION, config_values, group_by, variant_keys, with_data_versions
from probing.results import load, migrated
from probing.results.kinds import ProbeResults, Results, SClassProbeResults
from probing.results.load import check_file
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


def find_results(folder: Path) -> list[dict[str, Any]]:
    """Every results.json below `folder`, each with the file it came from, read as the current schema version holds
    it (`probing.results.migrated`); one that is not the results of a run (see `check_result`), of a kind this version
    does not know, or whose values do not fit its kind's type (`probing.results.load`; a file of the current version:
    its kind's JSON Schema, `check_file`) is refused. The bare NaN and Infinity tokens of results written before
    results.json was strict JSON are read as null: an undefined score, as it is recorded now."""
    results = []
    for path in sorted(Path(folder).rglob(RESULTS_FILE)):
        try:
            record = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda _: None)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, error.lineno, f"not valid JSON ({error.msg})",
                                  "delete the file (the run did not finish) or re-run that job") from error
        check_result(record, path)
        if "schema_version" in record:
            check_file(record, path)
        load(record, path)
        record = migrated(record)
        record["_file"] = str(path)
        results.append(record)
    return results


def is_kind(result: dict[str, Any], kind: str) -> bool:
    """Whether `result`, of any schema version (`probing.results.migrated`), is of `kind`: what selects a section's
    runs."""
    return migrated(result)["kind"] == kind


def split_scores(run: Results, split: str) -> dict[str, Any]:
    """The scores of a run (read through its type, `probing.results.load`) on `split` (dev, test, seen); {} where it
    has none."""
    return getattr(run, split) or {}


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


def with_variants(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each result (with its defaults filled) gains `variant`: the config values that set it apart from runs of the
    same setting (`<key>=<value>`, e.g. the key probe.mix.lr at 0.1), so that a sweep over a hyper-parameter is never
    averaged as if it were seeds, and its data version where runs of its setting read other versions of their data
    files (`with_data_versions`)."""
    records = [with_defaults(r) for r in results]
    base_keys = [k for k in SETTING_KEYS if k != "variant"]
    with_data_versions(records, [k for k in base_keys if k != "representation"])  # the runs of one table
    for runs in group_by(records, [*base_keys, DATA_VERSION]).values():
        keys = variant_keys(runs)
        for run in runs:
            run["variant"] = variant_label(run, keys)
    return records


def variant_label(run: dict[str, Any], keys: Iterable[str]) -> str:
    """`<key>=<value>` (the key probe.mix.lr at 0.1): the run's config values of `keys`, then its data version where
    it has one."""
    values = config_values(load(run).config or {})
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


def mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample std of the values present; std is None for fewer than two (no spread to report)."""
    present = [v for v in values if v is not None]
    mean = statistics.fmean(present) if present else None
    return mean, statistics.stdev(present) if len(present) > 1 else None


def mean_mix_weights(runs: Iterable[dict[str, Any]]) -> list[float] | None:
    """The scalar mix's weights averaged over the runs that learned one, layer by layer (None if none did)."""
    weights = [mixed.mix_weights for mixed in map(load, runs) if mixed.mix_weights]
    return [mean_std(column)[0] for column in zip(*weights)] if weights else None


def _aggregate_mix(runs: list[ProbeResults]) -> dict[str, Any]:
    """Mean (std) over seeds of each softmax-normalised mix weight and of gamma, for scalar-mix runs."""
    weights = [run.mix_weights for run in runs if run.mix_weights]
    if not weights:
        return {"mix_weights": None, "mix_weights_std": None, "gamma": None, "gamma_std": None}
    per_layer = [mean_std(column) for column in zip(*weights)]
    gamma, gamma_std = mean_std(run.gamma for run in runs)
    return {"mix_weights": [m for m, _ in per_layer], "mix_weights_std": [s or 0.0 for _, s in per_layer],
            "gamma": gamma, "gamma_std": gamma_std}


def _aggregate_setting(key: tuple, runs: list[dict]) -> dict[str, Any]:
    typed: list[SClassProbeResults] = [load(run) for run in runs]
    row = dict(zip(SETTING_KEYS, key))
    row["layer"] = typed[0].layer
    row["seeds"] = sorted((run.seed for run in typed), key=value_sort_key)
    for split, metric in itertools.product(EVAL_SPLITS, METRICS):
        row[f"{split}_{metric}"], row[f"{split}_{metric}_std"] = mean_std(
            split_scores(run, split).get(metric) for run in typed)
    test = split_scores(typed[0], "test")
    row["test_combinations"] = test.get("n_combinations")
    row["test_contexts"] = test.get("n_contexts")
    return {**row, **_aggregate_mix(typed)}


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting with mean/std over seeds of the scores, sorted by setting (representations in the
    paper's order, context size "all" last)."""
    groups = group_by(with_variants(results), SETTING_KEYS)
    return sorted((_aggregate_setting(key, runs) for key, runs in groups.items()), key=_row_sort_key)
