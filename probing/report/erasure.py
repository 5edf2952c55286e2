"""Concept erasure in the word-task section of the report (probe.py erase=...; probing/probes/erased_features.py):
how an erased run is labelled beside the plain one (its family label gains ", upos erased (leace)", so that the
tables and plots put before, after and the random control side by side), and the guardedness table of every
erasure run: what a fresh probe of the concept still finds in the erased words, and which kind of probe it is."""

from __future__ import annotations

from typing import Any

from probing.report.tables import markdown
from probing.results import load
from probing.vocabulary import ERASURE_METHODS

# The fresh probes of the guardedness report (results.json erasure.guardedness.fresh_probes), as table columns.
FRESH_PROBES = (("linear_before", "linear, before"), ("linear_erased", "linear, erased"),
                ("mlp1_erased", "MLP-1, erased"), ("linear_random_control", "linear, random control"))


def erasure_label(erasure: dict[str, Any] | None) -> str:
    """", upos erased (leace)" for a run with an erasure; "" without."""
    return f", {erasure['concept']} erased ({erasure['method']})" if erasure else ""


def erasure_sort_key(concept: str | None, method: str | None) -> tuple:
    """No erasure first, then by concept and by method in ERASURE_METHODS order."""
    if method is None:
        return (0, "", 0)
    return (1, concept or "", ERASURE_METHODS.index(method) if method in ERASURE_METHODS else len(ERASURE_METHODS))


def _accuracy(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def guardedness_row(result: dict[str, Any]) -> list[str]:
    run = load(result)
    erasure = run.erasure
    guarded = erasure["guardedness"]
    probes = guarded["fresh_probes"]
    test = guarded.get("test", {})
    return [run.task, str(run.representation), erasure["concept"], erasure["method"], str(erasure["rank"]),
            _accuracy(guarded["majority_rate"].get("test")),
            *(_accuracy(probes.get(key, {}).get("test")) for key, _ in FRESH_PROBES),
            _accuracy(test.get("cross_covariance")), _accuracy(test.get("edit_norm_ratio"))]


def erasure_run_sort_key(result: dict[str, Any]) -> tuple:
    """By task, representation, concept, method and seed."""
    run = load(result)
    return (run.task, str(run.representation), run.erasure["concept"],
            erasure_sort_key(run.erasure["concept"], run.erasure["method"]), run.seed)


def guardedness_section(results: list[dict[str, Any]]) -> str | None:
    """The guardedness of every erasure run (one row each, seed by seed), or None without any."""
    erased = sorted((result for result in results if load(result).erasure), key=erasure_run_sort_key)
    if not erased:
        return None
    header = ["task", "representation", "concept", "eraser", "rank", "majority", *(name for _, name in FRESH_PROBES),
              "cross-cov.", "edit"]
    intro = ("## Concept erasure: guardedness\n\nTest accuracy of fresh probes of the erased concept, trained on its "
             "erased training words (linear and MLP-1), on the words before erasure and on those of the random "
             "control of the same rank, beside the majority rate. LEACE and INLP guard against linear probes only: "
             "the MLP-1 column shows what a non-linear probe still finds. Cross-cov.: the cross-covariance of the "
             "erased test words with the concept, relative to before (0 = none left); edit: the mean norm of the "
             "edit relative to the words' spread.")
    return f"{intro}\n\n{markdown(header, [guardedness_row(result) for result in erased])}"
