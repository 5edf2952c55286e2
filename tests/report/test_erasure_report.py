"""Concept erasure in the word-task report: an erased run is a family of its own beside the plain probe (before,
each eraser, the random control side by side), and every erasure run gets a row of the guardedness table."""

from __future__ import annotations

from probing.report import write_report
from probing.report.erasure import erasure_label, erasure_sort_key, guardedness_section
from probing.report.word_probes import aggregate_word_runs, family_label
from tests.report.test_word_probes import word_result, write


def erased(layer, method, test, linear_erased, rank=16, seed=0):
    """A word-task result whose probe ran after `method` erased UPOS; its guardedness with the given test scores."""
    guardedness = {"majority_rate": {"train": 0.16, "dev": 0.17, "test": 0.153},
                   "test": {"cross_covariance": 0.229, "edit_norm_ratio": 0.415},
                   "fresh_probes": {"linear_before": {"dev": 0.93, "test": 0.916},
                                    "linear_erased": {"dev": 0.16, "test": linear_erased},
                                    "mlp1_erased": {"dev": 0.9, "test": 0.893},
                                    "linear_random_control": {"dev": 0.93, "test": 0.917}}}
    erasure = {"concept": "upos", "method": method, "rank": rank, "guardedness": guardedness}
    result = word_result(layer, "linear", seed, test, erasure=erasure)
    result["config"]["erase"] = {"concept": "upos", "eraser": {"_target_": f"probing.features.erasure.{method}"}}
    return result


def test_an_erased_run_is_labelled_by_its_concept_and_eraser_and_sorts_after_the_plain_probe():
    assert erasure_label(None) == ""
    assert family_label({"probe_family": "linear", "rank": 16, "erasure": {"concept": "upos", "method": "inlp"}}) == \
        "linear r=16, upos erased (inlp)"
    keys = [erasure_sort_key(None, None), erasure_sort_key("upos", "leace"), erasure_sort_key("upos", "inlp"),
            erasure_sort_key("upos", "mean_projection"), erasure_sort_key("upos", "random")]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_before_after_and_the_random_control_are_rows_of_one_table(tmp_path):
    results = [word_result(3, "linear", 0, 0.92), erased(3, "random", 0.924, 0.917), erased(3, "leace", 0.159, 0.153)]
    rows = aggregate_word_runs(results)
    assert [row["family"] for row in rows] == ["linear", "linear, upos erased (leace)", "linear, upos erased (random)"]
    assert [row["test_accuracy"] for row in rows] == [0.92, 0.159, 0.924]
    write_report(write(tmp_path / "sweep", results))
    report = (tmp_path / "sweep" / "report.md").read_text()
    assert "linear, upos erased (leace) acc." in report and "## Concept erasure: guardedness" in report


def test_the_guardedness_table_has_a_row_per_erasure_run_with_each_probes_test_accuracy():
    table = guardedness_section([word_result(3, "linear", 0, 0.92), erased(3, "leace", 0.159, 0.153),
                                 erased(0, "inlp", 0.157, 0.157, rank=256)])
    rows = [line for line in table.splitlines() if line.startswith("| upos")]
    assert rows == ["| upos | 0 | upos | inlp | 256 | 0.153 | 0.916 | 0.157 | 0.893 | 0.917 | 0.229 | 0.415 |",
                    "| upos | 3 | upos | leace | 16 | 0.153 | 0.916 | 0.153 | 0.893 | 0.917 | 0.229 | 0.415 |"]
    assert guardedness_section([word_result(3, "linear", 0, 0.92)]) is None
