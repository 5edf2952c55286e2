"""MDL prefix probes (Voita & Titov 2020 §2.2, online code): the S-1 prefix probes trained as one batched model
against S-1 probes trained one by one, each on its own prefix.

Synthetic data: N rows of D features (standard normal), K labels given by a random linear teacher (argmax of
x @ T), cut into S blocks at the paper's shares (`probing.probes.bits.mdl.DEFAULT_FRACTIONS`, S=11 for N=8000). Both
sides start from the same weights (the batched heads' `as_sequential(i)`) and train E epochs at batch size B with
Adam (lr 1e-3, fused as the probes' default), all tensors on the device before timing:

  batched   one `WordProbe` (family, hidden dim as given) whose online-code part holds the S-1 prefix probes; each step
            draws B rows from the whole training set and trains every prefix probe on the rows of its prefix
            (`PrefixProbes.losses`: the prefix's rows gathered, then its probe): N/B steps per epoch
  separate  S-1 standalone `nn.Sequential` probes, one after the other, probe i for E epochs on its own prefix
            (t_i rows, shuffled, batches of B): sum_i ceil(t_i / B) steps per epoch, the loop a user without
            batching would write

Both sides run the same probe-row passes per epoch, sum_{i<S} t_i (about N at the paper's shares, a geometric
series), since the batched side gathers each prefix's rows instead of masking them. The batched side takes N/B
steps per epoch, each running S-1 small products and one optimizer step over all prefix probes; the separate side
about N/B + S-1 steps with one probe each. Its main gain is elsewhere: the prefix probes train inside the main
probe's one Lightning fit (no S-1 extra fits with their own loops and validation), which this bench does not time.

Reported: the seconds of all E epochs of each side (`batched_s`, `separate_s`), their ratio
`ratio_vs_separate` = separate / batched, and the online codelength each side's probes give the labels (after the
last epoch, no best-epoch selection), which agree in size but not exactly: the batched probes take more, smaller
steps on their prefixes (see WordProbe).

    python bench/mdl.py                                   # mlp1, H=1000, D=384, K=17, N=8000, 5 epochs, B=256
    python bench/mdl.py --device cuda
    python bench/mdl.py --rows 500 --epochs 1             # a quick check that it runs
"""

from __future__ import annotations

import argparse
import math
import os

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from probing.devices import cpu_description, timed
from probing.probes.bits import mdl
from probing.probes.bits.parts import OnlineCodePart
from probing.probes.bits.prefix_probes import PrefixProbes
from probing.probes.word_probe import WordProbe


def prefix_probes(module) -> PrefixProbes:
    """The MDL prefix probes of a module with the online code."""
    return module.parts[OnlineCodePart.NAME].probes


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8000, help="training rows N")
    parser.add_argument("--input-dim", type=int, default=384, help="D (MiniLM's hidden size)")
    parser.add_argument("--labels", type=int, default=17, help="K (the 17 UPOS tags)")
    parser.add_argument("--family", default="mlp1", choices=["linear", "mlp1", "mlp2"])
    parser.add_argument("--hidden-dim", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA device; use --device cpu")
    return args


def adam(parameters) -> torch.optim.Optimizer:
    return torch.optim.Adam(parameters, lr=1e-3, fused=True)


def batched_epochs(module: WordProbe, data: dict[str, Tensor], epochs: int, batch_size: int,
                   generator: torch.Generator) -> None:
    optimizer = adam(prefix_probes(module).parameters())
    device = data["features"].device
    for _ in range(epochs):
        for index in torch.randperm(len(data["label"]), generator=generator).to(device).split(batch_size):
            optimizer.zero_grad(set_to_none=True)
            module.prefix_losses({key: value[index] for key, value in data.items()}).sum().backward()
            optimizer.step()


def separate_epochs(probes: list[nn.Sequential], ends: list[int], data: dict[str, Tensor], epochs: int,
                    batch_size: int, generator: torch.Generator) -> None:
    device = data["features"].device
    for probe, end in zip(probes, ends):
        rows = (data["order"] < end).nonzero().flatten()
        features, label = data["features"][rows], data["label"][rows]
        optimizer = adam(probe.parameters())
        for _ in range(epochs):
            for index in torch.randperm(len(rows), generator=generator).to(device).split(batch_size):
                optimizer.zero_grad(set_to_none=True)
                F.cross_entropy(probe(features[index]), label[index]).backward()
                optimizer.step()


@torch.no_grad()
def separate_codelength(probes: list[nn.Sequential], ends: list[int], data: dict[str, Tensor], labels: int) -> float:
    bits = []
    for probe, start, end in zip(probes, ends, ends[1:]):
        rows = ((data["order"] >= start) & (data["order"] < end)).nonzero().flatten()
        log_p = probe.eval()(data["features"][rows]).double().log_softmax(dim=-1)
        bits.append(float(-log_p.gather(1, data["label"][rows, None]).sum()) / math.log(2))
    return mdl.online_codelength(ends[0], labels, bits)


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    features = torch.randn(args.rows, args.input_dim)
    teacher = torch.randn(args.input_dim, args.labels)
    data = {"features": features, "label": (features @ teacher).argmax(dim=1),
            "order": torch.randperm(args.rows)}
    data = {key: value.to(device) for key, value in data.items()}
    ends = mdl.block_ends(args.rows)
    module = WordProbe.from_settings(input_dim=args.input_dim, labels=[str(k) for k in range(args.labels)],
                                     family=args.family, hidden_dim=args.hidden_dim, mdl_block_ends=ends).to(device)
    probes = [head.probes.as_sequential(0) for head in prefix_probes(module).heads]
    load_before = os.getloadavg()[0]
    batched_s = timed(lambda: batched_epochs(module, data, args.epochs, args.batch_size,
                                             torch.Generator().manual_seed(args.seed)), device)
    separate_s = timed(lambda: separate_epochs(probes, ends, data, args.epochs, args.batch_size,
                                               torch.Generator().manual_seed(args.seed)), device)
    batches = list(zip(data["features"].split(1024), data["label"].split(1024), data["order"].split(1024)))
    batched_bits = module.codelength({"features": f, "label": y, "order": o} for f, y, o in batches)
    print(f"# {args.family}, H={args.hidden_dim}, D={args.input_dim}, K={args.labels}, N={args.rows}, S={len(ends)} "
          f"blocks ({len(ends) - 1} prefix probes), {args.epochs} epochs, batch {args.batch_size}, device {device}, "
          f"torch threads {torch.get_num_threads()}, 1-min load average {load_before:.2f} -> "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs: {cpu_description()}")
    print(f"uniform_codelength_bits={batched_bits['uniform_codelength_bits']:.1f}")
    print(f"codelength_batched_bits={batched_bits['codelength_bits']:.1f}")
    print(f"codelength_separate_bits={separate_codelength(probes, ends, data, args.labels):.1f}")
    print(f"batched_s={batched_s:.3f}")
    print(f"separate_s={separate_s:.3f}")
    print(f"ratio_vs_separate={separate_s / batched_s:.2f}")


if __name__ == "__main__":
    main()
