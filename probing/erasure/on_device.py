"""A fitted eraser applied on a device to rows held on the host (probe.py's splits, bench/erase.py), the erased rows
returned to the host in float32. On a GPU a chunk at a time: the next chunk's host->device copy and the last one's
device->host copy run on their own streams, from and to pinned buffers, while the current chunk is edited, and each
chunk is the one the edit of the rows on the device takes (`edit_chunk_rows`), so the result has the same bits.
Elsewhere the eraser's own chunked loop (`FittedEraser.__call__`), in the rows' place."""

from __future__ import annotations

import torch
from torch import Tensor

from probing.erasure.fitted import FittedEraser, edit_chunk_rows, edit_dtype, edited_rows, exact_float32_matmul

SLOTS = 2  # buffers of each kind: a chunk is copied in or out of one while the other's chunk is edited


def erased_on(fitted: FittedEraser, vectors: Tensor, device: torch.device) -> Tensor:
    """`vectors` (..., D) erased on `device` in float32, returned where they were."""
    if device.type != "cuda" or vectors.device.type != "cpu":
        return fitted(vectors.to(device).float()).to(vectors.device)
    fitted.check_dim(vectors.shape[-1])
    return overlapped(fitted, vectors.reshape(-1, fitted.feature_dim), device).reshape(vectors.shape)


def overlapped(fitted: FittedEraser, rows: Tensor, device: torch.device) -> Tensor:
    """(N, D) host `rows` erased on the CUDA `device`, chunk by chunk, the copies overlapped with the edit: chunk i is
    staged into pinned memory (unless `rows` are pinned already) and copied in on one stream, edited on the current
    stream, copied out on another into a pinned buffer, and moved into the result by the host while chunk i + 1 is
    on the device. The rows cross the bus in their own dtype (float16 rows: half the bytes) and are edited in
    `edit_dtype` there."""
    erased = torch.empty(rows.shape, dtype=torch.float32)
    if not len(rows):
        return erased
    step = edit_chunk_rows(rows.shape[1], device)
    mean, left, right = fitted.operands(device, edit_dtype(rows.dtype, device))
    dropped = torch.tensor(fitted.dropped_dims, dtype=torch.long, device=device)
    compute = torch.cuda.current_stream(device)
    copy_in, copy_out = torch.cuda.Stream(device), torch.cuda.Stream(device)
    pinned = rows.is_pinned()
    shape = (min(step, len(rows)), rows.shape[1])
    staged_in = [None if pinned else torch.empty(shape, dtype=rows.dtype, pin_memory=True) for _ in range(SLOTS)]
    staged_out = [torch.empty(shape, dtype=torch.float32, pin_memory=True) for _ in range(SLOTS)]
    on_device_in = [torch.empty(shape, dtype=rows.dtype, device=device) for _ in range(SLOTS)]
    on_device_out = [torch.empty(shape, dtype=torch.float32, device=device) for _ in range(SLOTS)]
    copied_in, edited, copied_out = ([torch.cuda.Event() for _ in range(SLOTS)] for _ in range(3))
    waiting: tuple[int, slice] | None = None  # the chunk whose copy out the host takes next: (slot, rows)
    with exact_float32_matmul():
        for index, start in enumerate(range(0, len(rows), step)):
            slot, chunk = index % SLOTS, slice(start, min(start + step, len(rows)))
            count = chunk.stop - chunk.start
            source = rows[chunk]
            if not pinned:
                copied_in[slot].synchronize()  # the slot's last chunk has left its pinned buffer
                staged_in[slot][:count].copy_(source)
                source = staged_in[slot][:count]
            with torch.cuda.stream(copy_in):
                copy_in.wait_event(edited[slot])  # the slot's last chunk has been edited
                on_device_in[slot][:count].copy_(source, non_blocking=True)
                copied_in[slot].record(copy_in)
            compute.wait_event(copied_in[slot])
            compute.wait_event(copied_out[slot])  # the slot's last erased chunk has been copied out
            on_device_out[slot][:count].copy_(edited_rows(on_device_in[slot][:count], mean, left, right, dropped))
            edited[slot].record(compute)
            with torch.cuda.stream(copy_out):
                copy_out.wait_event(edited[slot])
                staged_out[slot][:count].copy_(on_device_out[slot][:count], non_blocking=True)
                copied_out[slot].record(copy_out)
            if waiting is not None:
                collect(erased, staged_out, copied_out, *waiting)
            waiting = slot, chunk
        collect(erased, staged_out, copied_out, *waiting)
    return erased


def collect(erased: Tensor, staged_out: list[Tensor], copied_out: list[torch.cuda.Event], slot: int,
            chunk: slice) -> None:
    """The erased chunk `chunk`, once copied out to the pinned buffer of `slot`, moved into `erased`."""
    copied_out[slot].synchronize()
    erased[chunk].copy_(staged_out[slot][:chunk.stop - chunk.start])
