"""results.json files of probe.py on word and word-pair tasks (task=upos, xpos, deprel, feats, ner, supersense,
jsonl) -> tables and plots by layer x probe family.

See docs/word_tasks.md, 'Results and report'.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from probing.report.aggregate import (
    SPLITS,
    is_kind,
    mean_mix_weights,
    mean_std,
    of_kind,
    representation_layer,
    representation_sort_key,
    split_scores,
    value_sort_key,
    with_defaults,
)
from probing.report.erasure import erasure_label, erasure_sort_key, guardedness_section
from probing.report.information import BITS_METRICS, bits_columns, bits_section, weight_decay_choices
from probing.report.plots import drawn_layer_ticks, pyplot, save_figure
from probing.report.runs import (
    DATA_VERSION,
    config_values,
    data_version_notes,
    group_by,
    variant_keys,
    with_data_versions,
)
from probing.report.tables import (
    display_value,
    format_score,
    markdown,
    setting_label,
    varying_keys,
    write_rows_csv,
)
from probing.results import load
from probing.results.kinds import WordProbeResults
from probing.vocabulary import MIX, PROBE_FAMILIES

CSV_FILE = "word_probes.csv"
# A row of the tables: runs equal in these keys differ only in their seed and are averaged.
WORD_SETTING_KEYS = ("task", "model", "random_init", "data", "variant", DATA_VERSION, "family", "representation")
# One table (and, per task, the lines of one plot) per value of these keys.
TABLE_KEYS = ("task", "model", "random_init", "data", "variant", DATA_VERSION)
# Setting keys shown in titles and legends (random_init is shown inside the model's name).
LABEL_KEYS = ("model", "data", "variant", DATA_VERSION)
# Scores of each split averaged over seeds: selectivity = accuracy - control_accuracy (when the control task ran).
SPLIT_METRICS = ("accuracy", "selectivity", "macro_f1", "control_accuracy", "control_macro_f1")
# The `mdl` block (Voita & Titov 2020) -> row keys; codelengths in kbits.
MDL_METRICS = (("codelength_bits", "mdl_codelength_kbits", 1e-3),
               ("compression", "mdl_compression", 1.0),
               ("control_codelength_bits", "mdl_control_codelength_kbits", 1e-3),
               ("control_compression", "mdl_control_compression", 1.0),
               ("uniform_codelength_bits", "mdl_uniform_codelength_kbits", 1e-3))
# Of a learned scalar mix (representation "mix"): the center of gravity (Tenney et al. 2019) and gamma.
MIX_METRICS = ("center_of_gravity", "gamma")
CSV_FIELDS = (
    "task", "model", "random_init", "data", "variant", DATA_VERSION, "family", "probe_family", "rank", "layer",
    "representation", "seeds",
    *(f"{split}_{metric}{std}" for split in SPLITS for metric in SPLIT_METRICS for std in ("", "_std")),
    *(f"{split}_n_examples" for split in SPLITS),
    *(f"{key}{std}" for _, key, _ in MDL_METRICS for std in ("", "_std")),
    *(f"{key}{std}" for key in MIX_METRICS for std in ("", "_std")),
    "conditioned_on",
    *(f"{split}_{metric}{std}" for split in SPLITS for metric in BITS_METRICS for std in ("", "_std")),
    "mix_weights", *(f"{split}_per_label_f1" for split in SPLITS),
)
# Horizontal lines of the plots: the scalar mix dotted, baselines in these styles (in the table's order).
MIX_STYLE = ":"
BASELINE_STYLES = ("--", "-.", (0, (5, 1, 1, 1, 1, 1)))


def is_word_probe_run(result: dict[str, Any]) -> bool:
    """A result of probe.py on a word or word-pair task."""
    return is_kind(result, WordProbeResults.KIND)


def family_label(result: dict[str, Any]) -> str:
    """"linear", "linear r=16" (rank-constrained), "mlp1", "mlp2"; after a concept erasure (probe.py erase=...)
    the erasure too: "linear, upos erased (leace)"."""
    run = load(result)
    label = f"{run.probe_family} r={run.rank}" if run.rank else str(run.probe_family)
    return label + erasure_label(run.erasure)


def family_sort_key(label: str) -> tuple:
    """Hewitt & Liang's order (linear, mlp1, mlp2), each full rank first, then by rank; each before its erasures
    (in ERASURE_METHODS order)."""
    match = re.fullmatch(r"(.*?)(?: r=(\d+))?(?:, (.*) erased \((.*)\))?", label)
    family, rank, concept, method = match.groups()
    # a family not listed sorts after them
    index = PROBE_FAMILIES.index(family) if family in PROBE_FAMILIES else len(PROBE_FAMILIES)
    return (index, family, 0 if rank is None else 1, int(rank or 0), *erasure_sort_key(concept, method))


def word_records(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each result with its defaults filled, its family label, its data version (`runs.with_data_versions`) and
    its `variant` (see aggregate.with_variants): the config values that set it apart from runs of the same setting
    other than by seed. A key that tells runs of one setting apart labels every run of its table (task, model, data),
    so that a sweep over a hyper-parameter at some layers keeps the other layers in the table of their own value."""
    records = [{**with_defaults(result), "family": family_label(result)} for result in results]
    with_data_versions(records, [k for k in TABLE_KEYS if k not in ("variant", DATA_VERSION)])
    setting = [k for k in WORD_SETTING_KEYS if k != "variant"]
    for table in group_by(records, [k for k in TABLE_KEYS if k != "variant"]).values():
        keys = sorted(set().union(*(variant_keys(runs) for runs in group_by(table, setting).values())))
        for run in table:
            values = config_values(load(run).config or {})
            run["variant"] = ", ".join(f"{key}={values.get(key)}" for key in keys)
    return records


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _per_label(runs: list[WordProbeResults], split: str) -> dict[str, float | None]:
    """Mean F1 of each label over the runs (None where no run has it defined)."""
    scores = [split_scores(run, split).get("per_label_f1") or {} for run in runs]
    labels = dict.fromkeys(label for run in runs for label in run.labels or ()) | dict.fromkeys(
        label for by_label in scores for label in by_label)
    return {label: mean_std(by_label.get(label) for by_label in scores)[0] for label in labels}


def _aggregate_setting(key: tuple, runs: list[dict]) -> dict[str, Any]:
    typed: list[WordProbeResults] = [load(run) for run in runs]
    row = dict(zip(WORD_SETTING_KEYS, key))
    row |= {"probe_family": typed[0].probe_family, "rank": typed[0].rank, "layer": typed[0].layer,
            "seeds": sorted((run.seed for run in typed), key=value_sort_key)}
    for split in SPLITS:
        for metric in SPLIT_METRICS:
            row[f"{split}_{metric}"], row[f"{split}_{metric}_std"] = mean_std(
                split_scores(run, split).get(metric) for run in typed)
        row[f"{split}_n_examples"] = split_scores(typed[0], split).get("n_examples")
        row[f"{split}_per_label_f1"] = _per_label(typed, split)
    for name, column, scale in MDL_METRICS:
        row[column], row[f"{column}_std"] = mean_std(_scaled((run.mdl or {}).get(name), scale) for run in typed)
    for name in MIX_METRICS:
        row[name], row[f"{name}_std"] = mean_std(getattr(run, name) for run in typed)
    row["mix_weights"] = mean_mix_weights(runs)
    return row | bits_columns(runs, SPLITS)


def _row_sort_key(row: dict) -> tuple:
    return (*(value_sort_key(row[k]) for k in TABLE_KEYS), family_sort_key(row["family"]),
            representation_sort_key(row["representation"]))


def aggregate_word_runs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting (WORD_SETTING_KEYS) with mean/std over seeds of every score, sorted by task, model,
    data, variant, family and representation (baselines, layers by number, the mix)."""
    groups = group_by(word_records(results), WORD_SETTING_KEYS)
    return sorted((_aggregate_setting(key, runs) for key, runs in groups.items()), key=_row_sort_key)


def _has(rows: list[dict], name: str) -> bool:
    return any(row[name] is not None for row in rows)


def _families(rows: list[dict]) -> list[str]:
    return sorted({row["family"] for row in rows}, key=family_sort_key)


def _representations(rows: list[dict]) -> list[str]:
    return sorted({row["representation"] for row in rows}, key=representation_sort_key)


def _grid(rows: list[dict], columns: list[tuple[str, str, str, str]]) -> str:
    """Rows: representations; columns (family, header, row key, number format) filled from the family's row."""
    cells = {(row["representation"], row["family"]): row for row in rows}
    body = [[name, *(format_score(cells.get((name, family)), key, number) for family, _, key, number in columns)]
            for name in _representations(rows)]
    return markdown(["representation", *(f"{family} {header}" for family, header, _, _ in columns)], body)


def accuracy_table(rows: list[dict]) -> str:
    """Test accuracy and (when the control task ran) selectivity, a column pair per family."""
    columns = []
    for family in _families(rows):
        mine = [row for row in rows if row["family"] == family]
        columns.append((family, "acc.", "test_accuracy", "{:.3f}"))
        if _has(mine, "test_selectivity"):
            columns.append((family, "sel.", "test_selectivity", "{:.3f}"))
    return _grid(rows, columns)


def mdl_table(rows: list[dict]) -> str | None:
    """Online codelength (kbits) and compression of the task's labels and of the control task's, per family that
    measured them; None if none did."""
    columns = []
    for family in _families(rows):
        mine = [row for row in rows if row["family"] == family]
        if _has(mine, "mdl_codelength_kbits"):
            columns += [(family, "kbits", "mdl_codelength_kbits", "{:.1f}"),
                        (family, "compr.", "mdl_compression", "{:.2f}")]
        if _has(mine, "mdl_control_codelength_kbits"):
            columns += [(family, "control kbits", "mdl_control_codelength_kbits", "{:.1f}"),
                        (family, "control compr.", "mdl_control_compression", "{:.2f}")]
    measured = {row["representation"] for row in rows if row["mdl_codelength_kbits"] is not None}
    return _grid([row for row in rows if row["representation"] in measured], columns) if columns else None


def mix_notes(rows: list[dict]) -> list[str]:
    """The learned scalar mix's center of gravity (and gamma) per family, when the runs report it."""
    return [f"Scalar mix, {row['family']}: center of gravity {format_score(row, 'center_of_gravity', '{:.2f}')}"
            + ("" if row["gamma"] is None else f", γ = {format_score(row, 'gamma', '{:.2f}')}")
            for row in rows if row["representation"] == MIX and row["center_of_gravity"] is not None]


def table_title(row: dict) -> str:
    title = f"{row['task']}: {display_value(row, 'model')}, data={row['data']}"
    return title + "".join(f", {row[key]}" for key in ("variant", DATA_VERSION) if row[key])


def _seed_counts(rows: list[dict]) -> str:
    return "/".join(str(n) for n in sorted({len(row["seeds"]) for row in rows}))


def tables_section(rows: list[dict]) -> str:
    """Per (task, model, data, variant): its accuracy/selectivity table, its MDL table, its mix notes."""
    parts = []
    for group in group_by(rows, TABLE_KEYS).values():
        scores = "Test accuracy and selectivity" if _has(group, "test_selectivity") else "Test accuracy"
        parts += [f"## {table_title(group[0])}",
                  f"{scores}, mean ± std over seeds ({_seed_counts(group)} per cell).\n\n{accuracy_table(group)}"]
        parts += data_version_notes(group[0][DATA_VERSION], "with its own scores")
        mdl = mdl_table(group)
        if mdl:
            parts.append(f"Online codelength of the training labels (kbits) and compression, task and control.\n\n"
                         f"{mdl}")
        parts += bits_section(group, _families(group))
        notes = mix_notes(group)
        if notes:
            parts.append("\n".join(f"- {note}" for note in notes))
    return "\n\n".join(parts)


def write_word_csv(rows: list[dict], path: Path) -> None:
    """Every aggregated row and score (codelengths in kbits; per-label F1 as "label=f1 ...")."""
    def label_scores(scores: dict[str, float | None]) -> str:
        return " ".join(f"{label}={'' if f1 is None else f'{f1:.4f}'}" for label, f1 in scores.items())

    def per_label(row: dict) -> dict[str, str]:
        return {f"{split}_per_label_f1": label_scores(row[f"{split}_per_label_f1"]) for split in SPLITS}

    write_rows_csv(rows, path, CSV_FIELDS, per_label)


def _lines(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The lines of a task's plots: (legend label, rows in representation order), one per setting and family."""
    keys = varying_keys(rows, LABEL_KEYS)
    lines = []
    for group in group_by(rows, (*TABLE_KEYS, "family")).values():
        setting = setting_label(group[0], keys)
        label = f"{setting}: {group[0]['family']}" if setting else group[0]["family"]
        lines.append((label, sorted(group, key=lambda row: representation_sort_key(row["representation"]))))
    return lines


def _draw(ax, group: list[dict], key: str, label: str, colour: str, style: str, levels: bool) -> None:
    """One line of `key` by layer (std over seeds as error bars) and, with `levels`, the group's baselines and mix
    as horizontal lines."""
    layers = [row for row in of_kind(group, "layer") if row[key] is not None]
    if layers:
        stds = [row[f"{key}_std"] or 0.0 for row in layers]
        ax.errorbar([representation_layer(row["representation"]) for row in layers], [row[key] for row in layers],
                    yerr=stds if any(stds) else None, fmt=style, capsize=3, color=colour, label=label)
    baseline_styles = itertools.cycle(BASELINE_STYLES)
    for row in of_kind(group, "baseline", MIX) if levels else ():
        line_style = MIX_STYLE if row["representation"] == MIX else next(baseline_styles)
        if row[key] is not None:
            ax.axhline(row[key], linestyle=line_style, color=colour, alpha=0.8,
                       label=f"{label}: {row['representation']}")


def _plot_panels(rows: list[dict], path: Path, title: str, panels: tuple) -> bool:
    """Side-by-side panels (ylabel, [(row key, line style, legend suffix), ...]) by layer, one colour per line
    (setting and family); False if no row has a layer with a score to draw."""
    lines = _lines(rows)
    if not any(row[key] is not None for _, keys in panels for key, _, _ in keys for row in of_kind(rows, "layer")):
        return False
    fig, axes = pyplot().subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False)
    for ax, (ylabel, keys) in zip(axes[0], panels):
        for index, (label, group) in enumerate(lines):
            for key, style, suffix in keys:
                _draw(ax, group, key, label + suffix, f"C{index % 10}", style, levels=not suffix)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(ylabel)
        ax.set_xticks(drawn_layer_ticks(representation_layer(r["representation"]) for r in of_kind(rows, "layer")))
        ax.grid(alpha=0.3)
    fixed = setting_label(rows[0], [k for k in LABEL_KEYS if k not in varying_keys(rows, LABEL_KEYS)])
    fig.suptitle(f"{title}\n{fixed}", fontsize=9)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    for ax in axes[0][:-1]:  # the union of the panels' legends, beside the last panel
        for handle, text in zip(*ax.get_legend_handles_labels()):
            if text not in labels:
                handles.append(handle)
                labels.append(text)
    axes[0][-1].legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def plot_accuracy_by_layer(rows: list[dict], path: Path) -> bool:
    """One task: test accuracy and selectivity by layer, a line per family (and setting)."""
    panels = (("test accuracy", [("test_accuracy", "-o", "")]),
              ("test selectivity (accuracy - control)", [("test_selectivity", "-o", "")]))
    if not _has(rows, "test_selectivity"):
        panels = panels[:1]
    return _plot_panels(rows, path, f"{rows[0]['task']}: probing by layer (Hewitt & Liang 2019)", panels)


def plot_mdl_by_layer(rows: list[dict], path: Path) -> bool:
    """One task: online codelength (kbits) and compression by layer, task solid and control dashed, a colour per
    family (and setting); False without MDL runs on layers."""
    panels = (("online codelength (kbits)", [("mdl_codelength_kbits", "-o", ""),
                                             ("mdl_control_codelength_kbits", "--s", " (control)")]),
              ("compression (uniform / online)", [("mdl_compression", "-o", ""),
                                                  ("mdl_control_compression", "--s", " (control)")]))
    return _plot_panels(rows, path, f"{rows[0]['task']}: MDL by layer (Voita & Titov 2020)", panels)


def plot_bits_by_layer(rows: list[dict], path: Path) -> bool:
    """One task: V-information by layer (solid) and conditional V-information (dashed) where the runs measured it, a
    colour per family (and setting), as Hewitt et al. 2021 Fig. 2; False without bits on layers."""
    given = next((row["conditioned_on"] for row in rows if row.get("conditioned_on") is not None), "X")
    panels = (("test bits", [("test_i_v", "-o", ""), ("test_conditional_i_v", "--s", f" | {given}")]),)
    return _plot_panels(rows, path, f"{rows[0]['task']}: V-information by layer (Xu et al. 2020; Hewitt et al. 2021)",
                        panels)


def _file_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name))


WORD_INTRO = ("Multi-class probes of each representation (Hewitt & Liang 2019: linear, MLP-1, MLP-2; `linear r=k`: "
              "rank k). Selectivity = accuracy - control-task accuracy. MDL (Voita & Titov 2020): online codelength "
              "of the training labels; compression = uniform codelength / online codelength; control: the same for "
              "the control task's labels. Dev scores, macro-F1 and per-label F1: `{csv}`.")


def write_word_probe_report(results: list[dict[str, Any]], out_dir: Path, csv_file: str = CSV_FILE,
                            prefix: str = "word_probes", intro: str = WORD_INTRO) -> tuple[str, list[str]]:
    """The Markdown section of the word-task probe runs, word_probes.csv and the plots per task; returns (text,
    files). A kind of run with the same scores (statement probes) names its own `csv_file`, plot `prefix` and
    `intro` (a template of `{csv}`)."""
    rows = aggregate_word_runs(results)
    write_word_csv(rows, out_dir / csv_file)
    files = [csv_file]
    for task, task_rows in group_by(rows, ("task",)).items():
        for name, plot in ((f"{prefix}_{_file_part(task[0])}_by_layer.png", plot_accuracy_by_layer),
                           (f"{prefix}_{_file_part(task[0])}_mdl_by_layer.png", plot_mdl_by_layer),
                           (f"{prefix}_{_file_part(task[0])}_bits_by_layer.png", plot_bits_by_layer)):
            if plot(task_rows, out_dir / name):
                files.append(name)
    plots = [name for name in files if name.endswith(".png")]
    text = f"{intro.format(csv=csv_file)}\n\n{tables_section(rows)}"
    decays = weight_decay_choices(word_records(results), tuple(k for k in WORD_SETTING_KEYS if k != "variant"))
    if decays:
        text += f"\n\nWeight decay chosen by the least dev H_V(Y|R) (bits; never by test).\n\n{decays}"
    guarded = guardedness_section(results)
    if guarded:
        text += f"\n\n{guarded}"
    return text + (f"\n\nPlots: {', '.join(f'`{name}`' for name in plots)}." if plots else ""), files


# This job's section of report.md (probing.report.OTHER_SECTIONS): which results are its runs, the writer of the
# section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_word_probe_run, write_word_probe_report, "Word-task probing report", ("representation",))
