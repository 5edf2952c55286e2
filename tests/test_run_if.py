"""tests/helpers/run_if.py: the skip marker of GPU tests and the reason it gives."""

from __future__ import annotations

import pytest

from tests.helpers import run_if as run_if_module
from tests.helpers.run_if import run_if


def skip_of(marker: pytest.MarkDecorator) -> tuple[bool, str]:
    return marker.mark.args[0], marker.mark.kwargs["reason"]


def test_without_enough_gpus_the_test_skips_naming_what_is_missing(monkeypatch):
    monkeypatch.setattr(run_if_module, "cuda_device_count", lambda: 0)
    assert skip_of(run_if(min_gpus=1)) == (True, "needs 1 CUDA GPU (found 0)")
    monkeypatch.setattr(run_if_module, "cuda_device_count", lambda: 1)
    assert skip_of(run_if(min_gpus=2, packages=("no_such_package_here",))) == (
        True, "needs 2 CUDA GPUs (found 1), the package no_such_package_here")


def test_with_what_it_needs_the_test_runs(monkeypatch):
    monkeypatch.setattr(run_if_module, "cuda_device_count", lambda: 2)
    assert skip_of(run_if(min_gpus=2, packages=("pytest",)))[0] is False
    assert skip_of(run_if())[0] is False


def test_bf16_is_asked_of_a_cuda_gpu(monkeypatch):
    monkeypatch.setattr(run_if_module, "bf16_supported", lambda: False)
    assert skip_of(run_if(bf16_cuda=True)) == (True, "needs bf16 on a CUDA GPU")
