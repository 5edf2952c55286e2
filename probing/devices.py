"""What the machine's processors compute fast, for the settings that choose a precision (extraction, training), and
timing on a device (the bench scripts)."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable

import torch


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes in bfloat16 in hardware: AVX-512 BF16 or AMX tiles on x86, the BF16 extension on
    Arm. Elsewhere torch emulates bf16, correctly but several times slower than float32."""
    try:  # private helpers of torch (2.1+); a torch without them gets the safe answer
        if platform.machine().lower() in ("aarch64", "arm64"):
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        return False


def has_native_bf16(device: torch.device) -> bool:
    """True when `device` (cpu or cuda) computes in bfloat16 in hardware (on CUDA: compute capability 8.0 or later)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return device.type == "cpu" and cpu_has_native_bf16()


def timed(run: Callable[[], object], device: torch.device) -> float:
    """Seconds `run()` takes on `device`, its queued GPU work included (synchronised before and after): what the
    bench scripts measure."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started
