"""The word-task report's measures in bits (`probing.probes.bits.information`): V-information and conditional
V-information beside accuracy, selectivity and MDL in one table, the weight decay chosen by dev cross-entropy, and
Pimentel et al.'s gain over a type-level representation.

See docs/information.md, 'Definitions'.
"""

from __future__ import annotations

from typing import Any

from probing.report.aggregate import mean_std, representation_sort_key, value_sort_key
from probing.report.runs import config_values, group_by
from probing.report.tables import format_score, markdown
from probing.results import load
from probing.vocabulary import BASELINE_LABELS

# The `bits` block's numbers read into the rows, per split (mean and std over seeds).
BITS_METRICS = ("h_y", "h_y_given_r", "i_v", "control_i_v", "selectivity_bits", "h_y_given_x", "h_y_given_xr",
                "conditional_i_v")
WEIGHT_DECAY_KEY = "probe.module.optimizer.weight_decay"
TYPE_LEVEL_CONTROL = BASELINE_LABELS["bertw"]
# (header, row key, number format) of each family's columns in the table of all measures, when some row has the key.
ALL_MEASURES = (("acc.", "test_accuracy", "{:.3f}"), ("sel.", "test_selectivity", "{:.3f}"),
                ("MDL kbits", "mdl_codelength_kbits", "{:.1f}"), ("compr.", "mdl_compression", "{:.2f}"),
                ("I_V bits", "test_i_v", "{:.2f}"), ("sel. bits", "test_selectivity_bits", "{:.2f}"),
                ("I_V given X bits", "test_conditional_i_v", "{:.2f}"))


def bits_columns(runs: list[dict], splits: tuple[str, ...]) -> dict[str, Any]:
    """The rows' bits: <split>_<metric> and its _std over the runs (seeds), and what they were conditioned on."""
    typed = [load(run) for run in runs]
    row: dict[str, Any] = {}
    for split in splits:
        for metric in BITS_METRICS:
            row[f"{split}_{metric}"], row[f"{split}_{metric}_std"] = mean_std(
                ((run.bits or {}).get(split) or {}).get(metric) for run in typed)
    given = [(run.bits or {}).get("conditioned_on") for run in typed]
    row["conditioned_on"] = next((value for value in given if value is not None), None)
    return row


def has_bits(rows: list[dict]) -> bool:
    return any(row.get("test_i_v") is not None for row in rows)


def all_measures_table(rows: list[dict], families: list[str]) -> str:
    """Rows: representations; per family the measures of ALL_MEASURES that some of its rows have."""
    cells = {(row["representation"], row["family"]): row for row in rows}
    columns = []
    for family in families:
        mine = [row for row in rows if row["family"] == family]
        columns += [(family, header, key, number) for header, key, number in ALL_MEASURES
                    if any(row.get(key) is not None for row in mine)]
    conditioned = sorted({str(row["conditioned_on"]) for row in rows if row.get("conditioned_on") is not None})
    given = ", ".join(conditioned) or "X"
    names = sorted({row["representation"] for row in rows}, key=representation_sort_key)
    body = [[name, *(format_score(cells.get((name, family)), key, number) for family, _, key, number in columns)]
            for name in names]
    header = ["representation",
              *(f"{family} {label.replace('given X', f'given {given}')}" for family, label, _, _ in columns)]
    return markdown(header, body)


def gain_table(rows: list[dict]) -> str | None:
    """Pimentel et al.'s gain per representation: I_V of the family with the least dev H_V(Y|R), minus BERTw's
    (the same choice of family); None without a BERTw row with bits."""
    best = {}
    for (name,), group in group_by([r for r in rows if r.get("dev_h_y_given_r") is not None],
                                   ("representation",)).items():
        best[name] = min(group, key=lambda row: row["dev_h_y_given_r"])
    control = best.get(TYPE_LEVEL_CONTROL)
    if control is None or control.get("test_i_v") is None:
        return None
    body = [[name, row["family"], f"{row['test_i_v']:.2f}", f"{row['test_i_v'] - control['test_i_v']:+.2f}"]
            for name, row in sorted(best.items(), key=lambda item: representation_sort_key(item[0]))]
    return markdown(["representation", "family (least dev H_V(Y|R))", "test I_V bits",
                     f"gain over {TYPE_LEVEL_CONTROL} bits"], body)


def weight_decay_choices(results: list[dict[str, Any]], setting: tuple[str, ...]) -> str | None:
    """Where runs of one setting (and seed) differ in weight decay: the one with the least dev H_V(Y|R), per seed;
    None when no setting has two weight decays with bits. `results` carry `family` and `variant`, `setting` names
    the keys of a setting other than the variant."""
    body = []
    measured = [r for r in results if "dev" in (load(r).bits or {})]
    keyed = [{**r, "_decay": config_values(load(r).config or {}).get(WEIGHT_DECAY_KEY)} for r in measured]
    for key, runs in group_by(keyed, (*setting, "seed")).items():
        decays = {repr(r["_decay"]) for r in runs}
        if len(decays) < 2:
            continue
        chosen = min(runs, key=lambda r: load(r).bits["dev"]["h_y_given_r"])
        tried = ", ".join(f"{r['_decay']}: {load(r).bits['dev']['h_y_given_r']:.3f}"
                          for r in sorted(runs, key=lambda r: value_sort_key(r["_decay"])))
        test = load(chosen).bits.get("test", {}).get("i_v")
        body.append([*(str(value) for value in key), str(chosen["_decay"]), tried,
                     "" if test is None else f"{test:.2f}"])
    if not body:
        return None
    return markdown([*setting, "seed", "weight decay chosen", "dev H_V(Y|R) bits by weight decay", "test I_V bits"],
                    body)


def bits_section(rows: list[dict], families: list[str]) -> list[str]:
    """The parts of one table group's section: the table of all measures and the gain table (when measured)."""
    if not has_bits(rows):
        return []
    parts = ["All measures: test accuracy, selectivity, online codelength and compression (MDL), V-information "
             "I_V(R->Y) and selectivity in bits, and conditional I_V(R->Y|X) where the runs were conditioned "
             f"(probe.condition_on).\n\n{all_measures_table(rows, families)}"]
    gain = gain_table(rows)
    if gain:
        parts.append(f"Gain over the type-level {TYPE_LEVEL_CONTROL} (Pimentel et al. 2020), test bits.\n\n{gain}")
    return parts
