"""The edit in float32, a GPU's (a refining pass, as exact as float64 rounded once; checked here on the CPU), and on a
device (probing.erasure.on_device: chunks whose copies overlap the edit, the same bits as the edit of rows already
there)."""

from __future__ import annotations

import pytest
import torch

from probing.erasure.fitted import edit_dtype
from probing.erasure.leace import LeaceEraser
from probing.erasure.on_device import erased_on
from tests.erasure.test_erasure import converged_accuracy, majority_rate, planted
from tests.helpers.run_if import run_if

# Largest relative error (||x'_32 - x'_64|| / ||x - mean|| per row) allowed between the float32 edit and the float64
# one: float16 storage rounds each stored value at 2^-11 (4.9e-4) relative, so an edit within 1e-5 adds nothing a
# stored feature resolves (fifty times below); the float32 edit's own round-off is a few 1e-7 (two rank-r products).
FLOAT32_TOLERANCE = 1e-5


def relative_row_error(erased, reference, x, mean) -> float:
    centred = x.double() - mean
    return float(((erased.double() - reference).norm(dim=1) / centred.norm(dim=1)).max())


@pytest.mark.parametrize("dim, classes", [(10, 3), (64, 6)])
def test_the_float32_edit_is_the_float64_edit_to_well_below_float16_rounding(dim, classes):
    generator = torch.Generator().manual_seed(dim)
    labels = torch.randint(0, classes, (2000,), generator=generator)
    offsets = 4 * torch.randn(classes, dim, dtype=torch.float64, generator=generator)
    x = (torch.randn(2000, dim, dtype=torch.float64, generator=generator) * 3 + 5 + offsets[labels]).float()
    fitted = LeaceEraser().fit(x, labels, classes)
    in_float64 = fitted(x.double())
    in_float32 = fitted(x, torch.float32)  # what a GPU computes
    assert edit_dtype(x.dtype, torch.device("cuda")) == torch.float32 and in_float32.dtype == torch.float32
    assert edit_dtype(x.dtype, torch.device("cpu")) == edit_dtype(torch.float64, torch.device("cuda")) == torch.float64
    error = relative_row_error(in_float32, in_float64, x, fitted.mean)
    assert 0 < error < FLOAT32_TOLERANCE
    half = x.half()  # float16 rows: computed in float32, rounded to float16 once, as float64 rounded once does
    from_float64 = fitted(half.double()).half()
    half_erased = fitted(half, torch.float32)
    assert half_erased.dtype == torch.float16
    assert (half_erased != from_float64).float().mean() < 0.01  # a value near a rounding boundary may round apart
    # and then by one unit at most (near zero, where cancellation leaves a few float32 units, by those)
    torch.testing.assert_close(half_erased, from_float64, rtol=2**-10, atol=FLOAT32_TOLERANCE)


def erased_direction_accuracy(erased: torch.Tensor, fitted, labels: torch.Tensor) -> float:
    """In-sample accuracy of a converged logistic regression of the concept on the coordinates of the erased rows
    along the erased directions, standardised: where the exact edit leaves no variance, so round-off is all a probe
    could read."""
    right = fitted.proj_right[fitted.proj_right.norm(dim=1) > 0]  # LEACE's factor may hold a zero row
    along = (erased.double() - fitted.mean) @ right.T
    return converged_accuracy((along - along.mean(dim=0)) / along.std(dim=0), labels, 3)


def test_the_refining_pass_leaves_no_concept_in_the_round_off_of_the_erased_directions():
    """One float32 pass leaves round-off along the erased directions that follows the concept (a converged probe of
    those coordinates reads it, 3 to 19 points over the majority rate here on an AMD EPYC, the amount depends on the
    BLAS); after the second pass it reads the majority rate, as with the float64 edit rounded to float32 once."""
    leaks = []
    for seed in range(4):
        x, labels = planted(seed=seed, separation=10.0, near_constant=True, dtype=torch.float32)
        fitted = LeaceEraser().fit(x, labels, 3)
        mean, left, right = (tensor.float() for tensor in (fitted.mean, fitted.proj_left, fitted.proj_right))
        one_pass = x - ((x - mean) @ right.T) @ left.T
        one_pass[:, 10] = mean[10]
        majority = majority_rate(labels)
        leaks.append(erased_direction_accuracy(one_pass, fitted, labels) - majority)
        assert erased_direction_accuracy(fitted(x, torch.float32), fitted, labels) <= majority + 0.01
        assert erased_direction_accuracy(fitted(x), fitted, labels) <= majority + 0.01  # float64 rounded once
    assert max(leaks) > 0.05


def test_a_converged_probe_of_the_float32_edit_scores_what_it_scores_on_the_float64_one():
    """Guardedness unchanged: a logistic regression trained to convergence on all features of the erased rows finds
    the majority rate on both (tests/erasure/test_erasure.py checks more planted concepts in float32)."""
    x, labels = planted(seed=0, separation=6.0, near_constant=True, dtype=torch.float32)
    fitted = LeaceEraser().fit(x, labels, 3)
    in_float32, in_float64 = fitted(x, torch.float32), fitted(x)
    assert converged_accuracy(in_float32, labels, 3) == converged_accuracy(in_float64, labels, 3)
    assert abs(converged_accuracy(in_float32, labels, 3) - majority_rate(labels)) <= 0.01


def test_the_edit_is_full_float32_whatever_matmul_precision_is_set():
    x, labels = planted(near_constant=True, dtype=torch.float32)
    fitted = LeaceEraser().fit(x, labels, 3)
    exact, before = fitted(x, torch.float32), torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")  # allows bf16 products where the backend has them
        assert torch.equal(fitted(x, torch.float32), exact) and torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)


def test_erased_on_the_cpu_is_the_eraser_s_float32_edit_where_the_rows_are():
    x, labels = planted(near_constant=True, dtype=torch.float32)
    fitted = LeaceEraser().fit(x, labels, 3)
    half = x.half()
    assert torch.equal(erased_on(fitted, half, torch.device("cpu")), fitted(half.float()))


@pytest.mark.gpu
@run_if(min_gpus=1)
@pytest.mark.parametrize("source", ["float32", "float16", "pinned"])
def test_erased_on_cuda_overlapped_is_the_edit_of_the_rows_on_the_gpu(monkeypatch, source):
    """Host rows erased on the GPU chunk by chunk (7 rows a chunk, the last one shorter, so that both buffers are
    reused), copies overlapped: the same bits as the edit of all rows copied there, and the float64 edit to
    FLOAT32_TOLERANCE, under TF32 products allowed too."""
    x, labels = planted(rows=600, near_constant=True, dtype=torch.float32)
    fitted = LeaceEraser().fit(x.cuda(), labels.cuda(), 3)
    rows = {"float32": x, "float16": x.half(), "pinned": x.pin_memory()}[source]
    monkeypatch.setattr("probing.erasure.fitted.DEVICE_CHUNK_VALUES", 7 * x.shape[1])
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        erased = erased_on(fitted, rows, torch.device("cuda"))
    finally:
        torch.set_float32_matmul_precision(before)
    assert erased.device.type == "cpu" and erased.dtype == torch.float32 and len(x) % 7
    assert torch.equal(erased, fitted(rows.cuda().float()).cpu())
    reference = fitted.to("cpu")(rows.double())
    assert relative_row_error(erased, reference, rows, fitted.mean.cpu()) < FLOAT32_TOLERANCE
    assert torch.equal(erased_on(fitted, rows[:0], torch.device("cuda")), torch.empty(0, x.shape[1]))
