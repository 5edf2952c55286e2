"""Peak memory of extracting the last-token vectors of every layer for N statements, against N.

A statement is a word-in-context record whose target is every word of its text, pooled at its last piece
(`features.pooling=last`); the encoder is a random Llama of 4 blocks (hidden 64, `--hidden`) built from a config, with a
byte-level BPE tokenizer trained on the generated words. Each size runs in a fresh subprocess that generates its N
statements into a `RecordTable`, then `extract_split`s them into a float16 store in a temporary folder. Measured:

  records       what the N statements' RecordTable holds (tracemalloc, after generating them): the data set's own
                cost (interned texts and token ids), reported apart
  traced peak   tracemalloc's peak during `extract_split`, less the records: every Python object and numpy array it
                allocates (numpy reports its buffers to tracemalloc), i.e. everything of extraction's that could grow
                with N (tokenised inputs, windows of vectors, the store's tables, the fingerprint pass); not torch's
                buffers (one batch's activations, bounded by the token budget, not by N) nor the libraries. The slope
                and ratio are taken on this figure: RSS would hide a growth of a few MB under ~450 MB of libraries
  peak RSS      the subprocess's ru_maxrss, for scale: ~400 MB of libraries that do not depend on N

Printed: one line per size, MB per 1k statements (the traced peak's slope between the smallest and largest size) and
`peak_ratio=<peak(N_max)/peak(N_min)>` (flat = ~1). Windows (rows written together) and tokenising calls are 1,000
rows by default, so that every size fills them: a decoder of many layers gets windows of that order from the
library's own rule (SmolLM2 at every layer: 64 MB / (31 x 576 x 4 B) = 939 rows), while this narrow model would get
its row cap, 16,384 (`--window 0 --prepare-rows 0`: the library's defaults; sizes below the cap then fill a single
window, whose memory grows with N up to the cap).

    python bench/memory.py                                  # N = 1k, 10k (a couple of minutes on 2 cores)
    python bench/memory.py --sizes 1000 10000 100000 --json bench-memory.json
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CITIES = ["paris", "london", "tokyo", "lima", "oslo", "cairo", "delhi", "rome", "quito", "accra", "hanoi", "bern"]
COUNTRIES = ["france", "japan", "peru", "norway", "egypt", "india", "italy", "ecuador", "ghana", "vietnam", "chile"]
FILLERS = ["the", "city", "of", "is", "in", "a", "large", "old", "capital", "near", "river", "coast", "north"]


def statement_words(rng: random.Random) -> list[str]:
    """One statement of 5 to 14 words ending in ".": "the city of <city> is in <country> ... ."."""
    words = ["the", "city", "of", rng.choice(CITIES), "is", "in", rng.choice(COUNTRIES)]
    words += [rng.choice(FILLERS) for _ in range(rng.randint(0, 6))]
    return words[:rng.randint(4, len(words))] + ["."]


def statements(count: int, seed: int = 0):
    """`count` statements as a RecordTable, labels alternating true/false (generated, never all held as objects)."""
    from probing.data.records import RecordTableBuilder

    rng, builder = random.Random(seed), RecordTableBuilder()
    for index in range(count):
        words = statement_words(rng)
        builder.add(words, tuple(range(len(words))), " ".join(words), ("true", "false")[index % 2], f"gen:{index}")
    return builder.build()


def save_tiny_llama(out: Path, hidden: int = 64) -> Path:
    """A random LlamaModel (4 blocks of width `hidden`) and a byte-level BPE tokenizer trained on the statements."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast, LlamaConfig, LlamaModel

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([" ".join(CITIES + COUNTRIES + FILLERS)] * 5, trainer)
    fast = GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                             unk_token="<|endoftext|>")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0)
    LlamaModel(config).eval().save_pretrained(out)
    return out


def measure(count: int, model: Path, window: int | None, prepare_rows: int | None, max_tokens_per_batch: int) -> dict:
    """One size, in this process: the figures of generating `count` statements and extracting them."""
    from probing.features import extraction
    from probing.features.encoder import WordEncoder

    if prepare_rows is not None:
        extraction.PREPARE_ROWS = prepare_rows
    encoder = WordEncoder(str(model), pooling="last", max_length=64)
    with tempfile.TemporaryDirectory() as folder:
        tracemalloc.start()
        records = statements(count)
        records_bytes = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        started = time.perf_counter()
        report = extraction.extract_split(records, encoder, Path(folder) / "store.h5", class_names=["false", "true"],
                                          progress=False, window=window, max_tokens_per_batch=max_tokens_per_batch)
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] - records_bytes
        tracemalloc.stop()
    return {"statements": count, "rows_computed": report.rows_computed, "tokens": report.tokens,
            "seconds": round(seconds, 2), "records_mb": round(records_bytes / 2**20, 3),
            "traced_peak_mb": round(peak / 2**20, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def run_sizes(sizes: list[int], window: int | None, prepare_rows: int | None, max_tokens_per_batch: int,
              hidden: int = 64) -> list[dict]:
    """Each size in a fresh subprocess (so that no size inherits another's allocations or high-water mark)."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        model = save_tiny_llama(Path(folder) / "tiny-llama", hidden)
        for count in sizes:
            command = [sys.executable, __file__, "--child", str(count), "--model", str(model),
                       "--max-tokens-per-batch", str(max_tokens_per_batch)]
            for option, value in (("--window", window), ("--prepare-rows", prepare_rows)):
                command += [option, str(value)] if value is not None else []
            done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"size {count} failed:\n{done.stderr[-3000:]}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def summary(rows: list[dict]) -> dict:
    first, last = min(rows, key=lambda row: row["statements"]), max(rows, key=lambda row: row["statements"])
    thousands = (last["statements"] - first["statements"]) / 1000
    slope = (last["traced_peak_mb"] - first["traced_peak_mb"]) / thousands if thousands else 0.0
    return {"mb_per_1k_statements": round(slope, 4),
            "peak_ratio": round(last["traced_peak_mb"] / first["traced_peak_mb"], 3),
            "rss_ratio": round(last["peak_rss_mb"] / first["peak_rss_mb"], 3)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="statement counts N")
    parser.add_argument("--window", type=int, default=1000, help="rows written together (0: the library's rule)")
    parser.add_argument("--prepare-rows", type=int, default=1000,
                        help="rows tokenised in one call at most (extraction.PREPARE_ROWS; 0: the library's, 1,024)")
    parser.add_argument("--max-tokens-per-batch", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=64, help="the random Llama's width")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child is not None:
        args.window, args.prepare_rows = args.window or None, args.prepare_rows or None
        print(json.dumps(measure(args.child, args.model, args.window, args.prepare_rows, args.max_tokens_per_batch)))
        return
    from probing.devices import cpu_description

    args.window, args.prepare_rows = args.window or None, args.prepare_rows or None
    rows = run_sizes(sorted(args.sizes), args.window, args.prepare_rows, args.max_tokens_per_batch, args.hidden)
    figures = {"cpu": cpu_description(), "hidden": args.hidden, "window": args.window,
               "prepare_rows": args.prepare_rows, "sizes": rows, **summary(rows)}
    print(f"cpu: {figures['cpu']}; window: {args.window or 'default'}; prepare rows: {args.prepare_rows or 'default'}")
    for row in rows:
        print(f"N={row['statements']:>7,}  records {row['records_mb']:7.2f} MB  extraction traced peak "
              f"{row['traced_peak_mb']:7.2f} MB  peak RSS {row['peak_rss_mb']:6.1f} MB  {row['seconds']:6.1f} s  "
              f"{row['tokens']:,} tokens")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(f"mb_per_1k_statements={figures['mb_per_1k_statements']} peak_ratio={figures['peak_ratio']} "
          f"rss_ratio={figures['rss_ratio']}")


if __name__ == "__main__":
    main()
