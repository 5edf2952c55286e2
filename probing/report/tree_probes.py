"""results.json files of probe.py on the tree tasks (task=tree_distance, tree_depth: the structural probes of Hewitt &
Manning 2019) -> tables by representation and rank of B, curves by rank and by layer, and pictures of predicted trees.

See docs/structural.md, 'Results and report'.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from probing.report.aggregate import (
    SPLITS,
    is_kind,
    mean_mix_weights,
    mean_std,
    of_kind,
    representation_kind,
    representation_layer,
    representation_sort_key,
    split_scores,
    value_sort_key,
    with_defaults,
)
from probing.report.plots import drawn_layer_ticks, pyplot, save_figure
from probing.report.runs import DATA_VERSION, data_version_notes, group_by
from probing.report.tables import (
    display_value,
    format_score,
    markdown,
    setting_label,
    varying_keys,
    write_rows_csv,
)
from probing.report.tree_pictures import draw_examples
from probing.report.word_probes import BASELINE_STYLES, MIX_STYLE, _file_part, table_title, word_records
from probing.results import load
from probing.results.kinds import TreeProbeResults
from probing.vocabulary import MIX, TREE_SCORES, TREE_UNDEFINED

CSV_FILE = "tree_probes.csv"
# The scores of each kind of structural probe, the headline first (those of probing.probes.trees.probe).
ALL_SCORES = tuple(itertools.chain(*TREE_SCORES.values()))
SCORE_NAMES = {"uuas": "UUAS", "dspr": "DSpr.", "root_acc": "Root %", "nspr": "NSpr."}
# Shown in percent, as the paper does (UUAS 82.5, DSpr. 0.857); results.json and the CSV hold fractions.
PERCENT = ("uuas", "root_acc")
# Each split's scores averaged over seeds: the score, the control task's, and selectivity = score - control score.
SPLIT_METRICS = tuple(f"{prefix}{score}" for score in ALL_SCORES for prefix in ("", "control_", "selectivity_"))
# Of each split, what the first run of a setting says (the same for all its runs): sentences, gold edges and
# sentences with a word that is not punctuation (those Root % scores).
COUNTS = ("sentences", "uuas_edges", "root_sentences")
# A row of the tables: runs equal in these keys differ only in their seed and are averaged.
TREE_SETTING_KEYS = ("task", "model", "random_init", "data", "variant", DATA_VERSION, "rank", "representation")
# One table per value of these keys; setting keys shown in plot legends where they vary.
TABLE_KEYS = ("task", "model", "random_init", "data", "variant", DATA_VERSION)
LABEL_KEYS = ("model", "data", "variant", DATA_VERSION)
RUN_AVERAGES = ("best_epoch", "epochs_trained", "center_of_gravity", "gamma")
CSV_FIELDS = (
    "task", "kind", "model", "random_init", "data", "variant", DATA_VERSION, "probe_family", "rank", "layer",
    "representation", "seeds",
    *(f"{split}_{metric}{std}" for split in SPLITS for metric in SPLIT_METRICS for std in ("", "_std")),
    *(f"{split}_{count}" for split in SPLITS for count in COUNTS),
    *(f"linear_{split}_{score}" for split in SPLITS for score in ALL_SCORES),
    *RUN_AVERAGES, "mix_weights",
)
LINEAR = "LINEAR (baseline)"
LINEAR_STYLES = ("-", "--", "-.", ":")  # one per table drawn in a plot, all black


def is_tree_probe_run(result: dict[str, Any]) -> bool:
    """A result of probe.py on a tree task (its `structure`: "distance" or "depth")."""
    return is_kind(result, TreeProbeResults.KIND)


def _aggregate_setting(key: tuple, runs: list[dict]) -> dict[str, Any]:
    typed: list[TreeProbeResults] = [load(run) for run in runs]
    first = typed[0]
    row = dict(zip(TREE_SETTING_KEYS, key))
    row |= {"kind": first.structure, "probe_family": first.probe_family, "layer": first.layer,
            "seeds": sorted((run.seed for run in typed), key=value_sort_key)}
    for split in SPLITS:
        for metric in SPLIT_METRICS:
            row[f"{split}_{metric}"], row[f"{split}_{metric}_std"] = mean_std(
                split_scores(run, split).get(metric) for run in typed)
        row |= {f"{split}_{count}": split_scores(first, split).get(count) for count in COUNTS}
        linear = first.linear_baseline.get(split) or {}
        row |= {f"linear_{split}_{score}": linear.get(score) for score in ALL_SCORES}
    row |= {name: mean_std(getattr(run, name) for run in typed)[0] for name in RUN_AVERAGES}
    row["mix_weights"] = mean_mix_weights(runs)
    return row


def _row_sort_key(row: dict) -> tuple:
    return (*(value_sort_key(row[k]) for k in TABLE_KEYS), representation_sort_key(row["representation"]),
            value_sort_key(row["rank"]))


def aggregate_tree_runs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting (TREE_SETTING_KEYS) with mean/std over seeds of every score, sorted by task, model, data,
    variant, representation (baselines, layers by number, the mix) and rank. The records and their variants are the
    word-task report's (`word_records`), whose settings are these: its family label ("linear r=16") holds the rank."""
    groups = group_by(word_records(results), TREE_SETTING_KEYS)
    return sorted((_aggregate_setting(key, runs) for key, runs in groups.items()), key=_row_sort_key)


def _shown(value: float | None, score: str) -> float | None:
    """A score (or its std, or a selectivity) in the unit of the tables and plots."""
    return None if value is None else value * (100 if score in PERCENT else 1)


def score_text(mean: float | None, std: float | None, score: str) -> str:
    """"82.5 ± 1.2" (UUAS, Root %: percent) or "0.857 ± 0.004" (DSpr., NSpr.); "-" when missing."""
    shown = {"value": _shown(mean, score), "value_std": _shown(std, score)}
    return format_score(shown, "value", "{:.1f}" if score in PERCENT else "{:.3f}")


def _has_selectivity(rows: list[dict], scores: tuple[str, ...]) -> bool:
    return any(row[f"test_selectivity_{score}"] is not None for row in rows for score in scores)


def scores_table(rows: list[dict]) -> str:
    """One table's rows (one task, so one kind): LINEAR, then a row per representation and rank with the test scores
    and, when the control task ran, their selectivities."""
    scores = TREE_SCORES[rows[0]["kind"]]
    selectivities = scores if _has_selectivity(rows, scores) else ()
    header = ["representation", "rank", *(SCORE_NAMES[s] for s in scores),
              *(f"{SCORE_NAMES[s]} sel." for s in selectivities)]
    linear = [LINEAR, "-", *(score_text(rows[0][f"linear_test_{s}"], None, s) for s in scores),
              *("-" for _ in selectivities)]
    body = [[row["representation"], str(row["rank"]),
             *(score_text(row[f"test_{s}"], row[f"test_{s}_std"], s) for s in scores),
             *(score_text(row[f"test_selectivity_{s}"], row[f"test_selectivity_{s}_std"], s) for s in selectivities)]
            for row in rows]
    return markdown(header, [linear, *body])


def tables_section(rows: list[dict]) -> str:
    """Per (task, model, data, variant): its table of test scores."""
    parts = []
    for group in group_by(rows, TABLE_KEYS).values():
        scores = TREE_SCORES[group[0]["kind"]]
        names = " and ".join(SCORE_NAMES[s] for s in scores)
        what = f"Test {names}" + (" with their selectivities" if _has_selectivity(group, scores) else "")
        seeds = "/".join(str(n) for n in sorted({len(row["seeds"]) for row in group}))
        parts += [f"## {table_title(group[0])}",
                  f"{what}, mean ± std over seeds ({seeds} per cell).\n\n{scores_table(group)}"]
        parts += data_version_notes(group[0][DATA_VERSION], "with its own LINEAR row")
        parts += undefined_notes(group)
    return "\n\n".join(parts)


def undefined_notes(rows: list[dict]) -> list[str]:
    """Why a score of the table is '-' in its LINEAR row or in a row of runs that recorded it as null (undefined on
    the test sentences): one line per such score, none when every score is defined."""
    undefined = [score for score in TREE_SCORES[rows[0]["kind"]]
                 if rows[0][f"linear_test_{score}"] is None or any(row[f"test_{score}"] is None for row in rows)]
    return [f"{SCORE_NAMES[score]} '-': undefined on these test sentences ({TREE_UNDEFINED[score]})."
            for score in undefined]


def write_tree_csv(rows: list[dict], path: Path) -> None:
    """Every aggregated row and score, fractions as results.json holds them."""
    write_rows_csv(rows, path, CSV_FIELDS)


def _plot_panels(kind: str, lines: list[tuple[str, list[tuple[float, dict]]]],
                 levels: list[tuple[str, dict, Any, str]], path: Path, title: str, xlabel: str, xticks: list,
                 log2: bool = False) -> bool:
    """A panel per score of `kind`: `lines` (legend label, [(x, row)]) of test scores with their std over seeds as
    error bars, a colour each; `levels` (legend label, {score: value}, line style, colour) as horizontal lines; the
    legend beside the last panel."""
    scores = TREE_SCORES[kind]
    fig, axes = pyplot().subplots(1, len(scores), figsize=(5.2 * len(scores), 4.0), squeeze=False)
    for ax, score in zip(axes[0], scores):
        for index, (label, points) in enumerate(lines):
            drawn = [(x, row) for x, row in points if row[f"test_{score}"] is not None]
            stds = [_shown(row[f"test_{score}_std"] or 0.0, score) for _, row in drawn]
            if drawn:
                ax.errorbar([x for x, _ in drawn], [_shown(row[f"test_{score}"], score) for _, row in drawn],
                            yerr=stds if any(stds) else None, fmt="-o", capsize=3, color=f"C{index % 10}",
                            label=label)
        for label, values, style, colour in levels:
            if values.get(score) is not None:
                ax.axhline(_shown(values[score], score), linestyle=style, color=colour, alpha=0.8, label=label)
        if log2:
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
        ax.set_xticks(xticks, [str(x) for x in xticks])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"test {SCORE_NAMES[score]}")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    legend = {}
    for ax in axes[0]:  # the union of the panels' legends
        for handle, text in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(text, handle)
    axes[0][-1].legend(list(legend.values()), list(legend), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def _legend(setting: str, what: str) -> str:
    return f"{setting}: {what}" if setting else what


def representation_label(name: str) -> str:
    """"layer 3" for a layer, else the representation's own name ("P-BERT", "mix")."""
    return f"layer {name}" if representation_kind(name) == "layer" else name


def _linear_levels(rows: list[dict], label_keys: list[str]) -> list[tuple[str, dict, Any, str]]:
    """The LINEAR baseline of each table the rows come from, black, a line style each."""
    tables = group_by(rows, TABLE_KEYS).values()
    return [(_legend(setting_label(table[0], label_keys), "LINEAR"),
             {score: table[0][f"linear_test_{score}"] for score in ALL_SCORES}, style, "black")
            for table, style in zip(tables, itertools.cycle(LINEAR_STYLES))]


def _plot_title(rows: list[dict], what: str, label_keys: list[str]) -> str:
    fixed = setting_label(rows[0], [k for k in LABEL_KEYS if k not in label_keys])
    return f"{rows[0]['task']}: {what} (Hewitt & Manning 2019)\n{fixed}"


def plot_by_rank(rows: list[dict], path: Path) -> bool:
    """One task: test scores against B's rank, a line per representation (and setting) probed at two or more ranks,
    LINEAR as a horizontal line; False if no representation was."""
    sweeps = [sorted(group, key=lambda row: row["rank"])
              for group in group_by(rows, (*TABLE_KEYS, "representation")).values()
              if len({row["rank"] for row in group}) > 1]
    if not sweeps:
        return False
    drawn = [row for group in sweeps for row in group]
    keys = varying_keys(drawn, LABEL_KEYS)
    lines = [(_legend(setting_label(group[0], keys), representation_label(group[0]["representation"])),
              [(row["rank"], row) for row in group]) for group in sweeps]
    title = _plot_title(drawn, "structural probe by rank", keys)
    return _plot_panels(rows[0]["kind"], lines, _linear_levels(drawn, keys), path, title, "rank of B (log2 axis)",
                        sorted({row["rank"] for row in drawn}), log2=True)


def plot_by_layer(rows: list[dict], path: Path) -> bool:
    """One task: test scores by layer, a line per rank (and setting) probed at two or more layers, with that line's
    baselines and mix as horizontal lines of its colour and LINEAR in black; False if no rank was."""
    sweeps = [group for group in group_by(rows, (*TABLE_KEYS, "rank")).values() if len(of_kind(group, "layer")) > 1]
    if not sweeps:
        return False
    drawn = [row for group in sweeps for row in group]
    keys = varying_keys(drawn, (*LABEL_KEYS, "rank"))
    lines, levels = [], []
    for index, group in enumerate(sweeps):
        label = setting_label(group[0], keys)
        layers = sorted(of_kind(group, "layer"), key=lambda row: representation_layer(row["representation"]))
        lines.append((label or "layers", [(representation_layer(row["representation"]), row) for row in layers]))
        styles = itertools.cycle(BASELINE_STYLES)
        levels += [(_legend(label, row["representation"]), {score: row[f"test_{score}"] for score in ALL_SCORES},
                    MIX_STYLE if row["representation"] == MIX else next(styles), f"C{index % 10}")
                   for row in sorted(of_kind(group, "baseline", MIX),
                                     key=lambda row: representation_sort_key(row["representation"]))]
    layer_keys = [k for k in keys if k != "rank"]
    return _plot_panels(rows[0]["kind"], lines, [*_linear_levels(drawn, layer_keys), *levels], path,
                        _plot_title(drawn, "structural probe by layer", keys), "layer (0 = embeddings)",
                        drawn_layer_ticks(x for _, points in lines for x, _ in points))


def best_run(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Of one task's runs that recorded examples, the one of the best dev headline score (the first of equals)."""
    recorded = [result for result in results if load(result).examples]
    if not recorded:
        return None
    headline = TREE_SCORES[load(recorded[0]).structure][0]

    def dev_score(result: dict[str, Any]) -> float:
        score = load(result).dev.get(headline)
        return float("-inf") if score is None else score  # null: undefined on that split

    return max(recorded, key=dev_score)


def plot_examples(results: list[dict[str, Any]], path: Path) -> bool:
    """One task: the examples of its best run (`best_run`), a panel per sentence; False if no run recorded any."""
    best = best_run(results)
    if best is None:
        return False
    run, shown = load(best), with_defaults(best)
    headline = TREE_SCORES[run.structure][0]
    title = (f"{run.task}: {display_value(shown, 'model')}, data={run.data}, "
             f"{representation_label(shown['representation'])}, "
             f"rank {run.rank}, seed {run.seed}: the best dev {SCORE_NAMES[headline]} "
             f"({score_text(run.dev.get(headline), None, headline)})")
    return draw_examples(run.structure, run.examples, title, path)


def write_tree_probe_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the tree-task probe runs, tree_probes.csv and the plots per task; returns (text,
    files)."""
    rows = aggregate_tree_runs(results)
    write_tree_csv(rows, out_dir / CSV_FILE)
    files = [CSV_FILE]
    for (task,), task_rows in group_by(rows, ("task",)).items():
        plots = ((f"tree_probes_{_file_part(task)}_by_rank.png", plot_by_rank, task_rows),
                 (f"tree_probes_{_file_part(task)}_by_layer.png", plot_by_layer, task_rows),
                 (f"tree_probes_{_file_part(task)}_examples.png", plot_examples,
                  [result for result in results if load(result).task == task]))
        files += [name for name, plot, data in plots if plot(data, out_dir / name)]
    intro = ("Structural probes (Hewitt & Manning 2019): a linear map B of the given rank. Distance probe: UUAS "
             "(the gold tree's undirected edges found by the minimum spanning tree of the predicted distances, "
             "punctuation left out) and DSpr. (Spearman correlation of predicted and gold distances); depth probe: "
             "Root % (sentences whose least deep predicted word is the root) and NSpr. (Spearman correlation of "
             "predicted and gold depths). UUAS and Root % in percent. Selectivity = score - control-task score "
             "(Hewitt & Liang 2019). LINEAR: the paper's baseline (each word attached to the next; a word's depth "
             "its position) on the same test sentences, taken from the table's first run (the runs of a table read "
             "the same data files, by the SHA-256 each results.json records, so they score the same sentences; its "
             "copies are not compared). "
             f"Dev scores, sentence counts and LINEAR's dev scores: `{CSV_FILE}`.")
    plots = [name for name in files if name.endswith(".png")]
    text = f"{intro}\n\n{tables_section(rows)}"
    return text + (f"\n\nPlots: {', '.join(f'`{name}`' for name in plots)}." if plots else ""), files


# This job's section of report.md (probing.report.OTHER_SECTIONS): which results are its runs, the writer of the
# section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_tree_probe_run, write_tree_probe_report, "Structural probing report",
           ("task", "probe_family", "rank", "representation", "linear_baseline", "examples"))
