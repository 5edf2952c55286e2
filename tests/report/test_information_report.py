"""The word-task report's bits (probing.report.information): the table of all measures, the weight decay chosen by
dev cross-entropy, Pimentel et al.'s gain over BERTw, and the V-information plot."""

from __future__ import annotations

import pytest

from probing.report import write_report
from tests.report.test_word_probes import csv_rows, table_lines, word_result, write

H_Y = 4.0


def bits(dev_given_r, test_given_r, conditioned=None):
    """A `bits` block: H_V(Y) = 4 bits, H_V(Y|R) as given; `conditioned` = (H_V(Y|X), H_V(Y|X,R)) on layer 0."""
    block = {"selected_by": "dev cross-entropy", "weight_decay": 0.0}
    for split, given_r in (("dev", dev_given_r), ("test", test_given_r)):
        block[split] = {"h_y": H_Y, "h_y_given_r": given_r, "i_v": H_Y - given_r, "control_i_v": 0.5,
                        "selectivity_bits": H_Y - given_r - 0.5}
        if conditioned is not None:
            given_x, given_xr = conditioned
            block[split] |= {"h_y_given_x": given_x, "h_y_given_xr": given_xr, "i_v_x": H_Y - given_x,
                             "conditional_i_v": given_x - given_xr}
    if conditioned is not None:
        block["conditioned_on"] = "0"
    return block


def with_decay(result, decay):
    result["config"]["probe"]["module"] = {"optimizer": {"weight_decay": decay}}
    result["config"]["paths"]["output_dir"] += f"-{decay}"
    return result


def test_all_measures_and_the_conditional_bits_by_layer_and_family(tmp_path):
    runs = [word_result(3, "linear", seed, 0.90, 0.60, bits=bits(1.0, 1.0 + seed / 10, (1.5, 0.9 + seed / 10)))
            for seed in (0, 1)]
    runs += [word_result(0, "linear", 0, 0.80, 0.60, bits=bits(1.5, 1.6, (1.5, 1.55))),
             word_result(3, "mlp1", 0, 0.95, 0.70, bits=bits(0.8, 0.7, (1.2, 0.6)))]
    folder = write(tmp_path, runs)
    write_report(folder)
    report = (folder / "report.md").read_text()
    after = report[report.index("All measures"):]
    header = next(line for line in after.splitlines() if line.startswith("| representation |"))
    assert "linear I_V bits" in header and "linear I_V given 0 bits" in header and "mlp1 I_V given 0 bits" in header
    rows = table_lines(report, "All measures")
    # layer 3, linear: I_V = 4 - mean(1.0, 1.1) = 2.95 ± 0.07; conditional = mean(0.6, 0.5) = 0.55 ± 0.07
    assert rows[1] == ("| 3 | 0.900 ± 0.000 | 0.300 ± 0.000 | 2.95 ± 0.07 | 2.45 ± 0.07 | 0.55 ± 0.07 "
                       "| 0.950 | 0.250 | 3.30 | 2.80 | 0.60 |")
    assert rows[0] == "| 0 | 0.800 | 0.200 | 2.40 | 1.90 | -0.05 | - | - | - | - | - |"
    csv = csv_rows(folder)
    assert float(csv[("linear", "3")]["test_conditional_i_v"]) == pytest.approx(0.55)
    assert csv[("mlp1", "3")]["conditioned_on"] == "0"
    assert (folder / "word_probes_upos_bits_by_layer.png").read_bytes().startswith(b"\x89PNG")


def test_the_weight_decay_with_the_least_dev_cross_entropy_is_chosen_never_test(tmp_path):
    # weight decay 0.01 has the better test bits, 0.001 the better dev bits: 0.001 is chosen
    runs = [with_decay(word_result(3, "linear", 0, 0.9, 0.6, bits=bits(1.0, 1.2)), 0.001),
            with_decay(word_result(3, "linear", 0, 0.9, 0.6, bits=bits(1.1, 0.8)), 0.01)]
    folder = write(tmp_path, runs)
    write_report(folder)
    chosen = table_lines((folder / "report.md").read_text(), "Weight decay chosen")
    assert len(chosen) == 1
    cells = [cell.strip() for cell in chosen[0].strip("|").split("|")]
    assert cells[-3:] == ["0.001", "0.001: 1.000, 0.01: 1.100", "2.80"]


def test_the_gain_over_bertw_uses_each_representations_family_of_least_dev_cross_entropy(tmp_path):
    runs = [word_result(3, "linear", 0, 0.9, 0.6, bits=bits(1.0, 1.0)),
            word_result(3, "mlp1", 0, 0.95, 0.6, bits=bits(0.7, 0.9)),
            word_result("BERTw", "linear", 0, 0.75, 0.6, bits=bits(2.0, 2.2)),
            word_result("BERTw", "mlp1", 0, 0.76, 0.6, bits=bits(2.1, 1.9))]
    folder = write(tmp_path, runs)
    write_report(folder)
    gain = table_lines((folder / "report.md").read_text(), "Gain over the type-level BERTw")
    # BERTw: linear (dev 2.0 < 2.1), test I_V 1.8; layer 3: mlp1 (dev 0.7), test I_V 3.1
    assert gain == ["| BERTw | linear | 1.80 | +0.00 |", "| 3 | mlp1 | 3.10 | +1.30 |"]
