"""The default probe run, end to end, against its FLOP floor.

Runs `python probe.py model=minilm layer=6` as a user does (400 epochs, control task on, best-dev weights; the
default logger unless `--override logger=...`), in a subprocess timed by its wall clock, `--precision bf16` adding
`trainer.precision=bf16-mixed`. Then, in this process, it measures the machine's rate for the two big products of a
training step in the same precision (x · W1ᵀ, (B, D) × (D, C·H), and its weight gradient: bench/probe.py's `gemm`
side, timed over `--gemm-steps` steps), and prints the run's FLOP floor: what its first layers alone cost at that
rate, read from the run's own results.json:

    epochs × 2 heads (the task's probes and the control task's) × (4 · n_train + 2 · n_dev) · D · C · H FLOPs

(the first layer's forward and weight gradient for every training context, its forward for every dev context; the
input gradient is not needed, the features being frozen). `run_vs_flop_floor` = run wall time / that floor: what the
rest of the run (second layers, Adam, data, Lightning, extraction when the store is not yet there, start-up) costs.

    python bench/probe_run.py --json bench-probe-run.json
    python bench/probe_run.py --precision bf16          # on a CPU with bf16 units (AVX-512 BF16, AMX) or a GPU
    python bench/probe_run.py --override trainer.max_epochs=40   # a shorter run: the floor follows its epochs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import torch

from probing.devices import timed

PRECISIONS = {"32": ("32-true", torch.float32), "bf16": ("bf16-mixed", torch.bfloat16)}
REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="32", choices=sorted(PRECISIONS))
    parser.add_argument("--model", default="minilm", help="model= of the run")
    parser.add_argument("--layer", default="6")
    parser.add_argument("--override", nargs="*", default=[], help="more overrides of the probe run")
    parser.add_argument("--gemm-steps", type=int, default=30, help="timed steps of the bare products")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser.parse_args()


def run_probe(args: argparse.Namespace, run_dir: Path) -> float:
    """Wall seconds of the probe run (its results.json in run_dir)."""
    command = [sys.executable, str(REPO / "probe.py"), f"model={args.model}", f"layer={args.layer}",
               f"trainer.precision={PRECISIONS[args.precision][0]}", f"hydra.run.dir={run_dir}", *args.override]
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"the probe run failed:\n{completed.stderr[-3000:]}")
    return seconds


def gemm_rate(dtype: torch.dtype, batch: int, dim: int, wide: int, steps: int) -> float:
    """FLOP/s of the step's two big products at these shapes: the mean over `steps` steps after as many untimed."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, dim, generator=generator).to(dtype)
    weight = torch.randn(wide, dim, generator=generator).to(dtype)
    grad = torch.randn(batch, wide, generator=generator).to(dtype)

    def products() -> None:
        for _ in range(steps):
            torch.mm(x, weight.T)
            torch.mm(grad.T, x)

    products()  # warm-up
    seconds = timed(products, torch.device("cpu"))
    return steps * 4 * batch * dim * wide / seconds


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-probe-run-") as folder:
        run_dir = Path(folder) / "run"
        run_s = run_probe(args, run_dir)
        results = json.loads((run_dir / "results.json").read_text())
    config = results["config"]
    dim, classes = feature_dim(results), len(results["classes"])
    hidden, batch = config["probe"]["module"]["hidden_dim"], config["probe"]["batch_size"]
    contexts = {split: results["data_summary"][split]["contexts"] - results["extraction_skipped_rows"][split]
                for split in ("train", "dev")}
    heads = 2 if "control_micro_f1" in results["test"] else 1  # the control task's probes train beside
    epochs = results["epochs_trained"]
    flops = epochs * heads * (4 * contexts["train"] + 2 * contexts["dev"]) * dim * classes * hidden
    rate = gemm_rate(PRECISIONS[args.precision][1], batch, dim, classes * hidden, args.gemm_steps)
    floor_s = flops / rate
    figures = {"precision": args.precision, "run_s": run_s, "epochs": epochs, "train_contexts": contexts["train"],
               "dev_contexts": contexts["dev"], "classes": classes, "dim": dim, "hidden": hidden, "heads": heads,
               "flops": flops, "gemm_flop_per_s": rate, "flop_floor_s": floor_s, "run_vs_flop_floor": run_s / floor_s,
               "test_micro_f1": results["test"]["micro_f1"], "cpus": os.cpu_count(),
               "torch_threads": torch.get_num_threads()}
    print(f"# probe.py model={args.model} layer={args.layer} trainer.precision={PRECISIONS[args.precision][0]}: "
          f"{epochs} epochs, {contexts['train']} train / {contexts['dev']} dev contexts, C={classes}, D={dim}, "
          f"H={hidden}, {heads} heads, test micro-F1 {figures['test_micro_f1']:.3f}; bare products "
          f"{rate / 1e9:.0f} GFLOP/s on {os.cpu_count()} CPUs")
    print(f"run_s={run_s:.1f} flop_floor_s={floor_s:.1f} run_vs_flop_floor={run_s / floor_s:.2f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


def feature_dim(results: dict) -> int:
    """The feature dimension of the run's stores (results.json of an s-class run names them)."""
    with h5py.File(results["stores"]["train"], "r") as store:
        return int(store["features"].shape[-1])


if __name__ == "__main__":
    main()
