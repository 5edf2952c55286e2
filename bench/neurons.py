"""The neuron analysis's retrained probes (analyze.py analysis=neurons): every (ranking, k) probe as a head of one
batched model, against the same probes trained one by one; and the wall time of the default analysis.

Synthetic data: N rows of D features (standard normal), K labels from a random linear teacher (argmax of x @ T),
dev rows as many as N/4. The heads are the analysis's: for R rankings (random permutations here: the cost does not
depend on the order) and each k of 1, 2, 4, ..., D, a linear probe and an MLP-1 (H hidden units, the cross-check) on
the first k neurons: 2 * R * len(ks) probes (60 for MiniLM's D=384, R=3). Both sides start from the same weights
(`as_sequential(head, kept_inputs=True)` of the batched heads) and train E epochs at batch size B with Adam (lr 1e-3):

  batched   `NeuronProbes` with the two masked `BatchedProbes` (a head's first layer reads all D inputs, masked):
            one step per batch for every probe
  separate  each probe on its own k columns (an `nn.Sequential`, its own Adam), one after the other: the loop a user
            without batching would write, its products k/D of the masked head's

Two measures, side by side in one run: `loop` (plain torch loops over the same batches: the model's own cost) and
`fit` (through Lightning's Trainer, as the analysis runs: one fit of the batched model against one fit per probe,
with its dev pass each epoch), after an untimed warm-up epoch. Reported: the seconds of each side,
`ratio_vs_separate` = separate / batched for each, and the machine's load average before and after.
No elastic-net penalty on either side (the analysis's linear heads have one; it costs one pass over the weights).

`--analysis`: also time `python analyze.py analysis=neurons task=upos layer=3` (the default analysis of MiniLM on the
bundled UD sample) as a user runs it, its stores in `--store-dir` (default: a fresh folder, so the extraction is
timed too).

    python bench/neurons.py                               # D=384, K=17, N=6680 (the bundled UPOS train), 3 epochs
    python bench/neurons.py --analysis
    python bench/neurons.py --rows 300 --input-dim 16 --epochs 1   # a quick check that it runs
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from probing.devices import cpu_description, timed
from probing.probes.components.batched_probes import BatchedProbes
from probing.probes.components.families import linear, mlp1
from probing.probes.datamodule import ProbingDataModule, TensorSplit
from probing.probes.neurons.probes import NeuronProbes, fit, head_losses
from probing.probes.neurons.rankings import k_values, selection_masks

REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=6680, help="training rows N (the bundled UPOS train: 6680)")
    parser.add_argument("--input-dim", type=int, default=384, help="D (MiniLM's hidden size)")
    parser.add_argument("--labels", type=int, default=17, help="K (the 17 UPOS tags)")
    parser.add_argument("--rankings", type=int, default=3, help="R (probe, probeless, random)")
    parser.add_argument("--hidden-dim", type=int, default=256, help="the MLP-1 cross-check's H")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--analysis", action="store_true", help="also time the default analysis of MiniLM")
    parser.add_argument("--store-dir", type=Path, help="--analysis: its stores (default: a fresh temporary folder)")
    return parser.parse_args()


def synthetic(rows: int, input_dim: int, labels: int, seed: int) -> dict[str, TensorSplit]:
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(input_dim, labels, generator=generator)
    splits = {}
    for name, count in (("train", rows), ("dev", max(rows // 4, 1))):
        features = torch.randn(count, input_dim, generator=generator)
        splits[name] = TensorSplit({"features": features, "label": (features @ teacher).argmax(dim=1)})
    return splits


def batched_heads(input_dim: int, labels: int, rankings: int, hidden_dim: int, seed: int) -> dict[str, BatchedProbes]:
    """The analysis's two groups: a linear and an MLP-1 head per (ranking, k), masked to the ranking's first k."""
    rng = np.random.default_rng(seed)
    masks = selection_masks([rng.permutation(input_dim) for _ in range(rankings)], k_values(input_dim), input_dim)
    torch.manual_seed(seed)
    return {"retrained": BatchedProbes(len(masks), input_dim, labels, linear(), input_mask=masks),
            "cross_check": BatchedProbes(len(masks), input_dim, labels, mlp1(hidden_dim=hidden_dim), input_mask=masks)}


def separate_probes(groups: dict[str, BatchedProbes]) -> list[tuple[nn.Sequential, torch.Tensor]]:
    """Every head alone on its kept columns, with the batched head's weights: (probe, its columns)."""
    return [(probes.as_sequential(head, kept_inputs=True), probes.input_mask[head].nonzero().flatten())
            for probes in groups.values() for head in range(probes.num_heads)]


def batches(split: TensorSplit, batch_size: int, seed: int, epoch: int) -> list[torch.Tensor]:
    return torch.randperm(len(split), generator=torch.Generator().manual_seed(seed + epoch)).split(batch_size)


def batched_loop(groups: dict[str, BatchedProbes], train: TensorSplit, epochs: int, batch_size: int,
                 seed: int) -> None:
    optimizer = torch.optim.Adam([p for probes in groups.values() for p in probes.parameters()], lr=1e-3)
    features, labels = train.tensors["features"], train.tensors["label"]
    for epoch in range(epochs):
        for rows in batches(train, batch_size, seed, epoch):
            optimizer.zero_grad(set_to_none=True)
            sum(head_losses(probes(features[rows]), labels[rows]).sum() for probes in groups.values()).backward()
            optimizer.step()


def separate_loop(probes: list[tuple[nn.Sequential, torch.Tensor]], train: TensorSplit, epochs: int,
                  batch_size: int, seed: int) -> None:
    features, labels = train.tensors["features"], train.tensors["label"]
    for probe, columns in probes:
        optimizer = torch.optim.Adam(probe.parameters(), lr=1e-3)
        selected = features[:, columns]
        for epoch in range(epochs):
            for rows in batches(train, batch_size, seed, epoch):
                optimizer.zero_grad(set_to_none=True)
                F.cross_entropy(probe(selected[rows]), labels[rows]).backward()
                optimizer.step()


def separate_fits(probes: list[tuple[nn.Sequential, torch.Tensor]], splits: dict[str, TensorSplit], epochs: int,
                  batch_size: int) -> None:
    """One Lightning fit per probe, on a datamodule of its own columns (a one-head `NeuronProbes`)."""
    for probe, columns in probes:
        family = (linear if len(probe) == 1 else mlp1)(hidden_dim=probe[0].out_features)
        alone = BatchedProbes(1, len(columns), probe[-1].out_features, family)
        selected = {name: TensorSplit({"features": split.tensors["features"][:, columns],
                                       "label": split.tensors["label"]}) for name, split in splits.items()}
        fit(NeuronProbes({"probe": alone}), ProbingDataModule(selected, batch_size), epochs, torch.device("cpu"))


def compare(rows: int, input_dim: int, labels: int, rankings: int, hidden_dim: int, epochs: int, batch_size: int,
            seed: int) -> dict[str, float]:
    """The seconds of both sides, as plain loops and as Lightning fits, and their ratios."""
    splits = synthetic(rows, input_dim, labels, seed)
    cpu = torch.device("cpu")
    groups = batched_heads(input_dim, labels, rankings, hidden_dim, seed)
    alone = separate_probes(groups)
    figures = {"probes": len(alone)}
    warm_up = batched_heads(input_dim, labels, rankings, hidden_dim, seed)  # first calls of the kernels, untimed
    batched_loop(warm_up, splits["train"], 1, batch_size, seed)
    separate_loop(separate_probes(warm_up)[:2], splits["train"], 1, batch_size, seed)
    figures["loop_batched_s"] = timed(lambda: batched_loop(groups, splits["train"], epochs, batch_size, seed), cpu)
    figures["loop_separate_s"] = timed(lambda: separate_loop(alone, splits["train"], epochs, batch_size, seed), cpu)
    groups = batched_heads(input_dim, labels, rankings, hidden_dim, seed)
    datamodule = ProbingDataModule(splits, batch_size)
    figures["fit_batched_s"] = timed(lambda: fit(NeuronProbes(groups), datamodule, epochs, cpu), cpu)
    figures["fit_separate_s"] = timed(lambda: separate_fits(alone, splits, epochs, batch_size), cpu)
    for measure in ("loop", "fit"):
        figures[f"{measure}_ratio_vs_separate"] = figures[f"{measure}_separate_s"] / figures[f"{measure}_batched_s"]
    return figures


def time_analysis(store_dir: Path | None) -> float:
    """Seconds of `python analyze.py analysis=neurons task=upos layer=3` (default settings, MiniLM)."""
    with tempfile.TemporaryDirectory() as scratch:
        stores = store_dir or Path(scratch) / "stores"
        command = [sys.executable, str(REPO / "analyze.py"), "analysis=neurons", "task=upos", "layer=3",
                   f"paths.store_dir={stores}", f"hydra.sweep.dir={Path(scratch) / 'sweep'}"]
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=scratch)
        return time.perf_counter() - started


def main() -> None:
    args = parse_args()
    load_before = os.getloadavg()[0]
    figures = compare(args.rows, args.input_dim, args.labels, args.rankings, args.hidden_dim, args.epochs,
                      args.batch_size, args.seed)
    print(f"# {figures['probes']} probes (linear and MLP-1 H={args.hidden_dim}, {args.rankings} rankings x k = "
          f"{k_values(args.input_dim)}), D={args.input_dim}, K={args.labels}, N={args.rows}, {args.epochs} epochs, "
          f"batch {args.batch_size}, torch threads {torch.get_num_threads()}, 1-min load average {load_before:.2f} -> "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs: {cpu_description()}")
    for key, value in figures.items():
        if key != "probes":
            print(f"{key}={value:.3f}" if key.endswith("_s") else f"{key}={value:.2f}")
    if args.analysis:
        print(f"analysis_s={time_analysis(args.store_dir):.1f}  (analyze.py analysis=neurons task=upos layer=3, "
              f"stores {'reused from ' + str(args.store_dir) if args.store_dir else 'extracted'})")


if __name__ == "__main__":
    main()
