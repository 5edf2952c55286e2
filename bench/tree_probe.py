"""Structural probe training cost: one epoch of `TreeProbe` steps against the machine's limit, the bare products of the
same shapes.

The batches are those of `probe.py task=tree_distance` (or `--kind depth`): the training sentences of the bundled UD
English-EWT sample (their real lengths, `probing.data.trees.TreeSource`), 20 a batch (the reference's), shuffled with
the seed; the word vectors random (D = MiniLM's 384 by default: the cost does not depend on their values), on the
device before timing. Both sides see the same batches:

  step   a training step of `TreeProbe` (its head: words projected by B, the Gram matrix, squared distances; its
         `task_loss`, the reference's L1 loss normalised by squared lengths), backward, and the Adam step of
         `configure_optimizers` (Lightning's logging of the loss left out: `bench/probe.py --trainer` measures
         Lightning's own overhead)
  bare   the limit: per batch only the products of a step, with fresh outputs as in a step
             P = X B               (B·T, D) x (D, r)       the words projected
             G = P Pᵀ              B x (T, r) x (r, T)     the Gram matrix (distance probe only)
             dP = dG P             B x (T, T) x (T, r)     its backward (twice as much: dG and dGᵀ, summed)
             dB = Xᵀ dP            (D, B·T) x (B·T, r)     B's gradient
         (X the padded batch (B, T, D), dG a fixed random (B, T, T))

`--synthetic-contexts N`: N words instead of the sample's 6,680, in sentences drawn (seeded, with replacement) from
the sample's training lengths, the last cut to fit; their vectors read from a float16 file made once and cached by
shape and seed (bench/synthetic.py; random, as above), so an epoch runs the paper's number of steps.

Reported: the median epoch time over epochs 2..E (the first is the warm-up) of each side and their ratio
`step_vs_bare` (target <= 1.5 on a CPU); epoch e of both sides runs back to back, so a shared machine's load hits both
alike.

    python bench/tree_probe.py                      # distance probe, full rank 384, 12 epochs
    python bench/tree_probe.py --kind depth --rank 64
    python bench/tree_probe.py --synthetic-contexts 200000 --epochs 3
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch
from synthetic import DEFAULT_CACHE, features_file, read_layer, sentence_lengths
from torch import Tensor

from probing.data.files import write_json_atomically
from probing.data.trees import TreeSource
from probing.devices import cpu_description, timed
from probing.probes.trees.probe import TreeProbe

TARGET = 1.5  # step / bare products, per epoch, on a CPU


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", default="distance", choices=["distance", "depth"])
    parser.add_argument("--input-dim", type=int, default=384, help="D (MiniLM's hidden size)")
    parser.add_argument("--rank", type=int, help="B's rank (default: D, full rank)")
    parser.add_argument("--batch-size", type=int, default=20, help="sentences a batch (the reference's 20)")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--synthetic-contexts", type=int, metavar="N",
                        help="N words in sentences of the sample's lengths, vectors from a cached file (see above)")
    parser.add_argument("--synthetic-cache", type=Path, default=DEFAULT_CACHE,
                        help="where the synthetic vectors are made once and kept")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the first epoch is the warm-up and is not timed")
    if (args.synthetic_contexts or 0) < 0:
        parser.error("--synthetic-contexts must be >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA device; use --device cpu")
    return args


def batches(lengths: list[int], args: argparse.Namespace, device: torch.device,
            vectors: np.ndarray | None = None) -> list[dict[str, Tensor]]:
    """The padded batches of one epoch (sentences shuffled with the seed): features (random; with `vectors`, the
    words' rows of it, sentence after sentence), gold (zeros: the cost does not depend on it) and lengths."""
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(lengths), generator=generator).tolist()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = []
    for first in range(0, len(order), args.batch_size):
        sentences = order[first:first + args.batch_size]
        chosen = torch.tensor([lengths[i] for i in sentences])
        longest = int(chosen.max())
        if vectors is None:
            features = torch.randn(len(chosen), longest, args.input_dim, generator=generator)
        else:
            features = torch.zeros(len(chosen), longest, args.input_dim)
            for row, i in enumerate(sentences):
                features[row, :lengths[i]] = torch.from_numpy(vectors[starts[i]:starts[i] + lengths[i]])
        gold = torch.zeros(len(chosen), longest, longest) if args.kind == "distance" else torch.zeros(len(chosen),
                                                                                                    longest)
        out.append({"features": features.to(device), "gold": gold.to(device), "lengths": chosen.to(device)})
    return out


def step_epoch(module: TreeProbe, optimizer: torch.optim.Optimizer, epoch: list[dict[str, Tensor]]) -> None:
    for batch in epoch:
        optimizer.zero_grad(set_to_none=True)
        module.task_loss(module.probes(batch["features"]), batch, control=False).backward()
        optimizer.step()


def bare_epoch(weight: Tensor, epoch: list[dict[str, Tensor]], gram_grads: list[Tensor], kind: str) -> None:
    for batch, gram_grad in zip(epoch, gram_grads):
        features = batch["features"]
        projected = (features.flatten(0, 1) @ weight).view(*features.shape[:2], -1)
        projected_grad = projected
        if kind == "distance":
            torch.bmm(projected, projected.transpose(1, 2))
            projected_grad = torch.bmm(gram_grad, projected) + torch.bmm(gram_grad.transpose(1, 2), projected)
        features.flatten(0, 1).T @ projected_grad.flatten(0, 1)


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    trees = TreeSource().load_trees().splits["train"]
    lengths, vectors, synthetic = [len(words) for words in trees.sentences], None, None
    if args.synthetic_contexts:
        lengths = sentence_lengths(lengths, args.synthetic_contexts, args.seed)
        path = features_file(args.synthetic_contexts, 1, args.input_dim, args.seed, args.synthetic_cache)
        vectors, synthetic = read_layer(path, 0), {"words": args.synthetic_contexts, "file": str(path)}
    epoch = batches(lengths, args, device, vectors)
    torch.manual_seed(args.seed)
    module = TreeProbe.from_settings(args.kind, input_dim=args.input_dim, family="linear", rank=args.rank).to(device)
    module.train()
    optimizer = module.configure_optimizers()["optimizer"]
    weight = module.probes.proj.detach().clone()
    gram_grads = [torch.randn(len(b["lengths"]), b["features"].shape[1], b["features"].shape[1]).to(device)
                  for b in epoch]
    step_s, bare_s = [], []
    for _ in range(args.epochs):
        step_s.append(timed(lambda: step_epoch(module, optimizer, epoch), device))
        bare_s.append(timed(lambda: bare_epoch(weight, epoch, gram_grads, args.kind), device))
    step, bare = statistics.median(step_s[1:]), statistics.median(bare_s[1:])
    figures = {"cpu": cpu_description(), "device": args.device, "kind": args.kind, "input_dim": args.input_dim,
               "rank": module.probes.rank, "sentences": len(lengths), "batches": len(epoch),
               "words": sum(lengths), "synthetic": synthetic,
               "threads": torch.get_num_threads(), "step_epoch_s": round(step, 4), "bare_epoch_s": round(bare, 4),
               "step_vs_bare": round(step / bare, 2)}
    print(f"{figures['cpu']}, {args.device}, torch threads {figures['threads']}: {args.kind} probe, "
          f"D={args.input_dim}, rank {figures['rank']}, {len(lengths)} sentences ({sum(lengths)} words"
          f"{', synthetic' if synthetic else ''}) in {len(epoch)} batches of {args.batch_size}")
    print(f"step epoch {step:.4f} s, bare products {bare:.4f} s (medians of epochs 2..{args.epochs}); target <= "
          f"{TARGET}")
    print(f"step_vs_bare={figures['step_vs_bare']}")
    if args.json:
        write_json_atomically(args.json, figures)


if __name__ == "__main__":
    main()
