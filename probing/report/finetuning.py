"""results.json files of train.py -> a table of the fine-tuning runs (mean ± std over seeds of the dev scores, Zhao et
al. 2020 Table 3 beside them) and, when the attention window varies, Table 7 (dev accuracy by window k, one column per
attention policy, the run without a window in the "all" row of each) and its plot.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from probing.data.files import open_atomically
from probing.report.aggregate import is_kind, mean_std, value_sort_key, variant_label
from probing.report.plots import pyplot, save_figure
from probing.report.runs import DATA_VERSION, group_by, run_seed, variant_keys, with_data_versions
from probing.report.tables import format_score, markdown
from probing.results import load
from probing.results.kinds import FinetuningResults

# A row is one setting; runs that differ only in their seed are averaged.
SETTING_KEYS = ("task", "model", "attention_window", "attention_policy", "isotropy_reg", "precision", "variant")
# Results written before the policies existed have no attention_policy: their windows were all "blocked".
POLICY_BEFORE_POLICIES = "blocked"
SCORES = ("accuracy", "f1")
# Zhao et al. 2020: Table 3 (BERT-base dev: accuracy; micro F1 for NER) and Table 7 (POS dev accuracy by window k;
# None = all).
ZHAO_TABLE3 = {"pos": 0.977, "sst2": 0.928, "mrpc": 0.853, "ner": 0.946}
ZHAO_TABLE7 = {0: 0.886, 2: 0.973, 4: 0.975, 8: 0.976, 16: 0.977, 32: 0.977, None: 0.977}
CSV_FIELDS = (*SETTING_KEYS, "seeds", "dev_accuracy", "dev_accuracy_std", "dev_f1", "dev_f1_std", "epochs_trained",
              "duration_s", "zhao2020_bert_base")


def is_finetuning(result: dict[str, Any]) -> bool:
    """A result of train.py."""
    return is_kind(result, FinetuningResults.KIND)


def with_variants(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each result gains `variant`: the other config values that set it apart from runs of the same setting, and its
    data version where runs of its setting read other versions of their data files (`with_data_versions`)."""
    records = [with_policy(result) for result in results]
    with_data_versions(records, ("task", "model"))  # the runs of one task's table and its window sweeps
    for runs in group_by(records, [*(key for key in SETTING_KEYS if key != "variant"), DATA_VERSION]).values():
        # the policy is a setting of its own (None without a window, whatever the config says)
        keys = [key for key in variant_keys(runs) if not key.endswith(".attention_policy")]
        for run in runs:
            run["variant"] = variant_label(run, keys)
    return records


def with_policy(result: dict[str, Any]) -> dict[str, Any]:
    """A copy of `result` with its attention_policy: as recorded, else blocked where it had a window."""
    record = dict(result)
    if "attention_policy" not in record:
        record["attention_policy"] = None if load(record).attention_window is None else POLICY_BEFORE_POLICIES
    return record


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting: mean and std over seeds of each dev score, the mean epochs and wall time."""
    rows = []
    for key, runs in group_by(with_variants(results), SETTING_KEYS).items():
        typed: list[FinetuningResults] = [load(run) for run in runs]
        row = dict(zip(SETTING_KEYS, key))
        row["seeds"] = sorted(map(run_seed, runs), key=value_sort_key)
        for score in SCORES:
            row[f"dev_{score}"], row[f"dev_{score}_std"] = mean_std(run.dev.get(score) for run in typed)
        row["epochs_trained"] = mean_std(run.epochs_trained for run in typed)[0]
        row["duration_s"] = mean_std(run.duration_s for run in typed)[0]
        row["zhao2020_bert_base"] = ZHAO_TABLE3.get(row["task"])
        rows.append(row)
    return sorted(rows, key=lambda row: tuple(value_sort_key(row[k]) for k in SETTING_KEYS))


def window_label(window: int | None) -> str:
    return "all" if window is None else str(window)


def runs_table(rows: list[dict[str, Any]]) -> str:
    has_f1 = any(row["dev_f1"] is not None for row in rows)
    header = ["task", "model", "attention window", "attention policy", "isotropy reg", "precision", "variant",
              "dev accuracy", *(["dev F1"] if has_f1 else []), "seeds", "epochs", "minutes", "Zhao et al. (BERT-base)"]
    body = [[row["task"], str(row["model"]), window_label(row["attention_window"]), row["attention_policy"] or "-",
             str(row["isotropy_reg"]),
             str(row["precision"]), row["variant"] or "-", format_score(row, "dev_accuracy"),
             *([format_score(row, "dev_f1")] if has_f1 else []), str(len(row["seeds"])),
             f"{row['epochs_trained']:g}", f"{row['duration_s'] / 60:.1f}",
             "-" if row["zhao2020_bert_base"] is None else f"{row['zhao2020_bert_base']:.3f}"] for row in rows]
    return markdown(header, body)


def window_sweeps(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows equal in all but the attention window and its policy, for groups with two or more windows (Table 7's
    shape), each sorted by window."""
    groups = group_by(rows, [key for key in SETTING_KEYS if key not in ("attention_window", "attention_policy")])
    return [sorted(group, key=lambda row: value_sort_key(row["attention_window"])) for group in groups.values()
            if len({row["attention_window"] for row in group}) > 1]


def policy_lines(group: list[dict[str, Any]]) -> dict[str | None, list[dict[str, Any]]]:
    """One sweep as {policy: its rows by window}, the run without a window (policy None) ending every line; a sweep
    with no windowed run of any policy is one line of its own."""
    policies = sorted({row["attention_policy"] for row in group if row["attention_window"] is not None}) or [None]
    return {policy: [row for row in group if row["attention_policy"] == policy or row["attention_window"] is None]
            for policy in policies}


def window_table(group: list[dict[str, Any]]) -> str:
    """Zhao et al. Table 7's layout: one row per window k, the dev accuracy of each attention policy, the paper's POS
    column beside them."""
    paper = group[0]["task"] == "pos"
    lines = policy_lines(group)
    windows = sorted({row["attention_window"] for row in group}, key=value_sort_key)
    cells = {(policy, row["attention_window"]): format_score(row, "dev_accuracy")
             for policy, rows in lines.items() for row in rows}
    body = [[window_label(window), *(cells.get((policy, window), "-") for policy in lines),
             *([f"{ZHAO_TABLE7[window]:.3f}" if window in ZHAO_TABLE7 else "-"] if paper else [])]
            for window in windows]
    header = ["context size k",
              *(f"{group[0]['task']} dev accuracy ({group[0]['model']}{f', {policy}' if policy else ''})"
                for policy in lines),
              *(["Zhao et al. Table 7 (BERT-base)"] if paper else [])]
    return markdown(header, body)


def plot_windows(sweeps: list[list[dict[str, Any]]], path: Path) -> bool:
    """Dev accuracy by attention window (x: k, "all" last), one line per sweep and policy; the paper's POS line
    dashed."""
    if not sweeps:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    windows = sorted({row["attention_window"] for group in sweeps for row in group}, key=value_sort_key)
    for group in sweeps:
        for policy, rows in policy_lines(group).items():
            xs = [windows.index(row["attention_window"]) for row in rows]
            stds = [row["dev_accuracy_std"] or 0.0 for row in rows]
            ax.errorbar(xs, [row["dev_accuracy"] for row in rows], yerr=stds if any(stds) else None, fmt="-o",
                        capsize=3, label=f"{group[0]['task']}, {group[0]['model']}{f', {policy}' if policy else ''}")
    if any(group[0]["task"] == "pos" for group in sweeps):
        known = [w for w in windows if w in ZHAO_TABLE7]
        ax.plot([windows.index(w) for w in known], [ZHAO_TABLE7[w] for w in known], "--", color="grey",
                label="Zhao et al. Table 7 (BERT-base, POS)")
    ax.set_xticks(range(len(windows)), [window_label(w) for w in windows])
    ax.set_xlabel("attention window k (words on each side)")
    ax.set_ylabel("dev accuracy")
    ax.set_title("Fine-tuning with attention limited to k words (Zhao et al. 2020, App. C)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def write_finetuning_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the fine-tuning runs, finetuning.csv and the window plot; returns (text, files)."""
    rows = aggregate(results)
    parts = [runs_table(rows)]
    sweeps = window_sweeps(rows)
    if sweeps:
        parts += ["## By attention window (Zhao et al. 2020, Table 7)", *(window_table(group) for group in sweeps)]
    with open_atomically(out_dir / "finetuning.csv", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows({**{key: row[key] for key in CSV_FIELDS}, "seeds": " ".join(map(str, row["seeds"]))}
                         for row in rows)
    files = ["finetuning.csv"]
    if plot_windows(sweeps, out_dir / "accuracy_by_attention_window.png"):
        files.append("accuracy_by_attention_window.png")
    return "\n\n".join(parts), files
