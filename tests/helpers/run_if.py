"""`run_if`: skip a test where what it needs is missing, with a reason that names it (lightning-hydra-template's
tests/helpers/run_if.py, trimmed to what the tests here need).

    @pytest.mark.gpu
    @run_if(min_gpus=1)
    def test_extraction_on_cuda(...): ...

GPU tests also carry the `gpu` marker (registered in pyproject.toml), so `pytest -m gpu` runs exactly them on a
machine with a GPU; without one they are skipped with the reason ("needs 1 CUDA GPU (found 0)")."""

from __future__ import annotations

import importlib.util

import pytest


def cuda_device_count() -> int:
    """The CUDA devices torch sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def bf16_supported() -> bool:
    import torch

    return cuda_device_count() > 0 and torch.cuda.is_bf16_supported()


def run_if(min_gpus: int = 0, bf16_cuda: bool = False, packages: tuple[str, ...] = ()) -> pytest.MarkDecorator:
    """A marker that skips the test unless every condition holds: at least `min_gpus` CUDA devices, bf16 on CUDA
    (`bf16_cuda`), each of `packages` importable. The skip reason lists every missing one."""
    missing = []
    if min_gpus:
        found = cuda_device_count()
        if found < min_gpus:
            missing.append(f"{min_gpus} CUDA GPU{'s' if min_gpus > 1 else ''} (found {found})")
    if bf16_cuda and not bf16_supported():
        missing.append("bf16 on a CUDA GPU")
    missing += [f"the package {name}" for name in packages if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(bool(missing), reason="needs " + ", ".join(missing))
