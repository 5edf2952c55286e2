"""What the machine's processors compute fast, for the settings that choose a precision (extraction, training), how
the process keeps its freed memory, and timing on a device (the bench scripts)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform
import time
from collections.abc import Callable

import torch

from probing.errors import ConfigError, setting

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# Blocks up to this size are carved from the heap and kept there when freed: a training step's tensors (a
# BERT-large probe's first-layer weight gradient is 106 MiB) are reused, while a whole feature layer read at once
# (often larger) is still mapped and handed back to the system when freed.
KEPT_BLOCK_BYTES = 256 * 2**20
# Free memory at the top of the heap beyond this is handed back to the system.
KEPT_FREE_BYTES = 1024 * 2**20


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes in bfloat16 in hardware: AVX-512 BF16 or AMX tiles on x86, the BF16 extension on
    Arm. Elsewhere torch emulates bf16, correctly but several times slower than float32."""
    try:  # private helpers of torch (2.1+); a torch without them gets the safe answer
        if platform.machine().lower() in ("aarch64", "arm64"):
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        return False


def cpu_description(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The processor as a benchmark figure should name it: its model name, its x86 family and model (figures on two
    CPUs sold under one name, e.g. two EPYC generations, differ) and whether it has bf16 units, e.g. "AMD EPYC (x86
    family 26 model 2), bf16 units". From /proc/cpuinfo on Linux, the platform module elsewhere."""
    fields = {}
    try:
        with open(cpuinfo_path, encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if not line.strip():
                    break  # the first processor's block is enough
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        name += f" (x86 family {fields['cpu family']} model {fields['model']})"
    return f"{name}, {'bf16 units' if cpu_has_native_bf16() else 'no bf16 units'}"


def has_native_bf16(device: torch.device) -> bool:
    """True when `device` (cpu or cuda) computes in bfloat16 in hardware (on CUDA: compute capability 8.0 or later)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return device.type == "cpu" and cpu_has_native_bf16()


def keep_freed_memory() -> bool:
    """Have glibc keep freed blocks of up to 256 MiB in the process's heap for the next allocation, instead of handing
    every block over 32 MiB back to the system on free. True when glibc took the settings (False elsewhere: macOS,
    Windows, musl, where nothing changes).

    Why: torch's CPU tensors come straight from malloc, without a caching allocator. A probe training step allocates
    and frees the same large tensors every step (the first layer's weight gradients, 40 MiB per head for MiniLM; the
    (B, C·H) hidden layers and their gradients, 27 MiB); glibc maps each of them afresh and the kernel zero-fills every
    page on first touch: 25,000 page faults per fp32 step, 39,000 per bf16 step, 22% and 37% of the step
    (bench/probe.py). jemalloc or tcmalloc (LD_PRELOAD) avoid it too, but need a system library and an environment
    variable set before Python starts; mallopt does it from inside the process.
    """
    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    kept = mallopt(M_MMAP_THRESHOLD, KEPT_BLOCK_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, KEPT_FREE_BYTES) == 1
    if not kept:
        log.debug("this C library refused the mallopt settings: freed memory goes back to the system as before")
    return kept


def synchronized_clock(device: torch.device) -> float:
    """time.perf_counter() once `device` has done its queued GPU work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def timed(run: Callable[[], object], device: torch.device) -> float:
    """Seconds `run()` takes on `device`, its queued GPU work included (synchronised before and after): what the
    bench scripts measure."""
    started = synchronized_clock(device)
    run()
    return synchronized_clock(device) - started


def check_precision(precision: str, device: torch.device, allow_emulated_bf16: bool = False) -> None:
    """Refuse a forward precision that `device` cannot run, or (bf16 without bf16 units) would run only emulated."""
    name = setting("precision")
    if precision == "16" and device.type != "cuda":
        raise ConfigError(f"{name}=16 (float16 autocast) runs on CUDA only, but the device is {device}. "
                          f"Fix: {name}=32 (or bf16 on a CPU with bf16 units)")
    if precision != "bf16":
        return
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"{name}=bf16 runs on a CPU or CUDA, but the device is {device}. Fix: {name}=32")
    if not allow_emulated_bf16 and not has_native_bf16(device):
        raise ConfigError(f"{name}=bf16: this {device.type} has no bf16 units, so bf16 would be emulated "
                          f"and several times slower than float32. Fix: {name}=32, or "
                          f"{setting('allow_emulated_bf16')}=true to check bf16 accuracy on this machine anyway (slow)")
