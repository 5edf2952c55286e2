"""A probe run (or a sweep of them), end to end, against its FLOP floor.

Runs `python probe.py model=minilm layer=6` as a user does (400 epochs, control task on, best-dev weights; the
default logger unless `--override logger=...`), in a subprocess timed by its wall clock, `--precision bf16` adding
`trainer.precision=bf16-mixed`; `--layers 0,1,2` runs the multirun `probe.py -m layer=0,1,2` (its report included)
and `--override` adds any other setting (`task=upos probe.mdl=true`: a word task with MDL). Then, in this process, it
measures the machine's rate for the big products of a training step in the same precision (the first layer's
W1 · xᵀ and its weight gradient G · x in the model's layout, P products of (H, D) x (D, B) for the P probes of one
model: bench/probe.py's `gemm` side, timed over `--gemm-steps` steps), and prints the FLOP floor: what the products
of every probe layer of every run would cost at that rate, read from each run's own results.json. Per epoch:

    probes × (n_train · train + n_dev · forward)                       the task's probes and the control task's
    + Σ_p targets × (t_p · train + n_dev · forward)                    with MDL: prefix probe p on its t_p examples
    forward = 2 Σ_j in_j · out_j       train = forward + 2 Σ_j in_j · out_j + 2 Σ_{j>1} in_j · out_j

over the layers j of one probe (s-class: D → H → 2, C probes per task; word probes: their family's layers, one probe
per task, K labels); a training example costs the forward, the weight gradients and the gradients of every layer's
input but the first (the features are frozen); every dev example is scored every epoch, by the prefix probes too.
`run_vs_flop_floor` = wall time / floor: what the rest (Adam, the memory-bound passes, data, Lightning, start-up,
extraction when a store is not yet there, the report) costs.

    python bench/probe_run.py --json bench-probe-run.json
    python bench/probe_run.py --precision bf16          # on a CPU with bf16 units (AVX-512 BF16, AMX) or a GPU
    python bench/probe_run.py --override trainer.max_epochs=40   # a shorter run: the floor follows its epochs
    python bench/probe_run.py --layers 0,1,2,3,4,5,6 --override task=upos probe.mdl=true   # the UPOS sweep with MDL
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

import h5py
import torch

from probing.data.files import write_json_atomically
from probing.devices import cpu_description, keep_freed_memory, timed
from probing.probes.components.batched_probes import first_layer_products
from probing.probes.components.families import from_record

PRECISIONS = {"32": ("32-true", torch.float32), "bf16": ("bf16-mixed", torch.bfloat16)}
REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="32", choices=sorted(PRECISIONS))
    parser.add_argument("--model", default="minilm", help="model= of the run")
    parser.add_argument("--layers", default="6", help="layer= of the run; several (0,1,2): a multirun over them")
    parser.add_argument("--override", nargs="*", default=[], help="more overrides of the probe run")
    parser.add_argument("--gemm-steps", type=int, default=30, help="timed steps of the bare products")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser.parse_args()


def run_probe(args: argparse.Namespace, folder: Path) -> float:
    """Wall seconds of the probe run or sweep (its results.json files under `folder`)."""
    sweep = "," in args.layers
    command = [sys.executable, str(REPO / "probe.py"), *(["-m"] if sweep else []), f"model={args.model}",
               f"layer={args.layers}", f"trainer.precision={PRECISIONS[args.precision][0]}",
               f"hydra.{'sweep' if sweep else 'run'}.dir={folder}", *args.override]
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"the probe run failed:\n{completed.stderr[-3000:]}")
    return seconds


@cache
def gemm_rate(dtype: torch.dtype, batch: int, dim: int, probes: int, hidden: int, steps: int) -> float:
    """FLOP/s of the first layer's two big products at these shapes: the mean over `steps` steps after as many
    untimed."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, dim, generator=generator).to(dtype)
    weight = torch.randn(probes, hidden, dim, generator=generator).to(dtype)
    grad = torch.randn(probes, hidden, batch, generator=generator).to(dtype)

    def products() -> None:
        for _ in range(steps):
            first_layer_products(weight, x, grad)

    products()  # warm-up
    seconds = timed(products, torch.device("cpu"))
    return steps * 4 * batch * dim * probes * hidden / seconds


def probe_layers(results: dict) -> tuple[list[int], int]:
    """(the layer sizes of one probe, input first; the probes of one task) of the run: C binary probes of the
    s-class task (results written before they recorded their family were MLP-1s), one K-way probe of a word task."""
    probe, dim = results["config"]["probe"], feature_dim(results)
    family = from_record({"family": results.get("probe_family", "mlp1"), "hidden_dim": probe["module"]["hidden_dim"],
                          "rank": results.get("rank")})
    if "classes" in results:
        return family.layer_sizes(dim, 2), len(results["classes"])
    dim *= 3 if results.get("pair_product") else 2 if results.get("pair") else 1
    return family.layer_sizes(dim, len(results["labels"])), 1


def run_flops(results: dict) -> dict:
    """The FLOP floor's FLOPs of one run (module docstring), with what they were computed from."""
    sizes, probes = probe_layers(results)
    products = [fan_in * fan_out for fan_in, fan_out in zip(sizes, sizes[1:])]
    forward = 2 * sum(products)
    train = forward + 2 * sum(products) + 2 * sum(products[1:])
    summary, skipped = results["data_summary"], results["extraction_skipped_rows"]
    rows = {split: summary[split].get("contexts", summary[split].get("examples")) - skipped[split]
            for split in ("train", "dev")}
    control = "control_micro_f1" in results["test"] or "control_accuracy" in results["test"]
    targets = probes * (2 if control else 1)  # the task's probes and the control task's
    prefix_ends = results.get("mdl", {}).get("block_ends", [])[:-1]
    # the probes train on every training example, prefix probe p on its first t_p; all score every dev example
    per_epoch = targets * sum(examples * train + rows["dev"] * forward for examples in [rows["train"], *prefix_ends])
    return {"flops": results["epochs_trained"] * per_epoch, "sizes": sizes, "probes": probes, "targets": targets,
            "train": rows["train"], "dev": rows["dev"], "epochs": results["epochs_trained"],
            "prefix_probes": len(prefix_ends), "batch": results["config"]["probe"]["batch_size"]}


def main() -> None:
    args = parse_args()
    keep_freed_memory()  # as probe.py does
    with tempfile.TemporaryDirectory(prefix="bench-probe-run-") as folder:
        run_s = run_probe(args, Path(folder))
        results = [json.loads(path.read_text()) for path in sorted(Path(folder).rglob("results.json"))]
    if not results:
        sys.exit("the probe run wrote no results.json")
    runs, floor_s = [], 0.0
    for result in results:
        flops = run_flops(result)
        sizes = flops["sizes"]
        rate = gemm_rate(PRECISIONS[args.precision][1], flops["batch"], sizes[0], flops["probes"], sizes[1],
                         args.gemm_steps)
        run_floor_s = flops["flops"] / rate
        floor_s += run_floor_s
        runs.append({**flops, "layer": result["layer"], "gemm_flop_per_s": rate, "floor_s": run_floor_s,
                     "duration_s": result.get("duration_s"),
                     "test": {key: value for key, value in result["test"].items() if not isinstance(value, dict)}})
    figures = {"precision": args.precision, "layers": args.layers, "overrides": args.override, "run_s": run_s,
               "flop_floor_s": floor_s, "run_vs_flop_floor": run_s / floor_s, "runs": runs, "cpus": os.cpu_count(),
               "cpu": cpu_description(), "torch_threads": torch.get_num_threads()}
    first = runs[0]
    print(f"# probe.py model={args.model} layer={args.layers} {' '.join(args.override)} trainer.precision="
          f"{PRECISIONS[args.precision][0]}: {len(runs)} run(s), {first['epochs']} epochs, {first['train']} train / "
          f"{first['dev']} dev examples, probe layers {first['sizes']} x {first['targets']} probes, "
          f"{first['prefix_probes']} MDL prefix probes; bare products {first['gemm_flop_per_s'] / 1e9:.0f} GFLOP/s "
          f"on {os.cpu_count()} CPUs: {figures['cpu']}")
    for run in runs:
        score = run["test"].get("micro_f1", run["test"].get("accuracy"))
        print(f"  layer {run['layer']}: floor {run['floor_s']:.1f} s, the run's own duration_s {run['duration_s']} s, "
              f"test {score:.3f}")
    print(f"run_s={run_s:.1f} flop_floor_s={floor_s:.1f} run_vs_flop_floor={run_s / floor_s:.2f}")
    if args.json:
        write_json_atomically(args.json, figures)


def feature_dim(results: dict) -> int:
    """The feature dimension of the run's stores (results.json names them)."""
    with h5py.File(results["stores"]["train"], "r") as store:
        return int(store["features"].shape[-1])


if __name__ == "__main__":
    main()
