"""Reading one layer of a feature store vs `numpy.load` of the same array, and the store's size on disk.

A synthetic store (random features, N rows, L layers, D dimensions, written window by window in record order, as
extraction writes it) is built in a temporary folder once per storage dtype, and once more in float16 with its rows
in shuffled blocks (the layout of stores written before extraction wrote windows, read with a scatter into record
order). Then, side by side and alternating, each best of R:

  numpy.load    `np.load` of the layer as `read_layer` returns it (float32, record order), saved with `np.save`
  read_layer    `FeatureStore.read_layer(layer)`: the layer's blocks read, their XXH3 hashes verified, NaN and
                inf refused, rows put in record order, float32 out (a fresh store object each time, so no cached
                layout)

Both read from the page cache (each file is read once before timing): the comparison is of the code, not the disk.
Also reported: `read_layer(layer, dtype=None)` (storage dtype out, vs `np.load` of that array), the peak memory a
read adds beyond its result (traced numpy allocations), and the file size per million contexts and layer.
The last line, `read_vs_numpy=`, is the float16 store in record order.

`--store PATH` measures an existing store instead: `read_layer` of each layer (or `--layer N`) against `np.load` of
the same array saved to a temporary .npy, side by side as above; `read_vs_numpy=` is then the lowest over the
layers measured.

    python bench/store.py --rows 100000 --dim 768 --layers 3 --json bench-store.json
    python bench/store.py --rows 1000000 --dim 64 --layers 3
    python bench/store.py --store stores/some-store.h5 --layer 6
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from probing.data.files import write_json_atomically
from probing.data.records import WordInContext
from probing.features.extraction import window_rows
from probing.features.store import FeatureStore, StoreWriter

BATCH_ROWS = 300  # the blocks of the shuffled layout


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="contexts in the store")
    parser.add_argument("--dim", type=int, default=768, help="hidden size (768: bert-base)")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="timed reads of each kind; the best counts")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--store", type=Path, help="measure this existing store instead of synthetic ones")
    parser.add_argument("--layer", type=int, help="with --store: only this layer (default: each layer)")
    return parser.parse_args()


def synthetic_store(path: Path, rows: int, dim: int, layers: int, dtype: str, shuffled: bool = False,
                    seed: int = 0) -> None:
    """A complete store written as extraction writes it (blocks of `window_rows` rows in record order), or with
    `shuffled` in blocks of BATCH_ROWS random rows."""
    records = [WordInContext(tokens=("w",), target=(0,), word=f"w{i % 1000}", sclass="a", source=str(i))
               for i in range(rows)]
    metadata = {"model_name": "bench", "pooling": "mean", "context_size": "all", "dtype": dtype,
                "num_layers": layers, "hidden_size": dim, "num_rows": rows}
    FeatureStore.create(path, metadata, records, ["a"])
    generator = np.random.default_rng(seed)
    order = generator.permutation(rows) if shuffled else np.arange(rows)
    block = BATCH_ROWS if shuffled else window_rows(metadata)
    with StoreWriter(path) as writer:
        for first in range(0, rows, block):
            batch = order[first:first + block]
            writer.write_rows(batch, generator.standard_normal((len(batch), layers, dim), dtype=np.float32))


def best_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def peak_extra_bytes(run: Callable[[], np.ndarray]) -> int:
    """Peak traced allocation of `run` beyond the array it returns."""
    tracemalloc.start()
    result = run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - result.nbytes


def measure(folder: Path, args: argparse.Namespace, dtype: str, shuffled: bool = False) -> dict:
    layout = "shuffled" if shuffled else "in order"
    path = folder / f"bench-{dtype}-{layout.replace(' ', '-')}.h5"
    synthetic_store(path, args.rows, args.dim, args.layers, dtype, shuffled)
    return {"dtype": dtype, "layout": layout, **compare(path, args.layers // 2, folder, args.repeats),
            "mb_per_million_contexts_per_layer": round(path.stat().st_size / args.rows / args.layers, 1)}


def compare(path: Path, layer: int, folder: Path, repeats: int) -> dict:
    """`read_layer` of one layer of the store at `path` against `np.load` of the same array, side by side."""
    with FeatureStore(path) as store:
        reference, stored = store.read_layer(layer), store.read_layer(layer, dtype=None)
    npy, npy_stored = folder / f"{path.stem}-{layer}.npy", folder / f"{path.stem}-{layer}-stored.npy"
    np.save(npy, reference)
    np.save(npy_stored, stored)

    def read(out_dtype: str | None = "float32") -> np.ndarray:
        with FeatureStore(path) as store:
            return store.read_layer(layer, dtype=out_dtype)

    assert np.array_equal(read(), np.load(npy))
    timings = {"numpy_load": [], "read_layer": [], "numpy_load_stored": [], "read_layer_stored": []}
    for _ in range(repeats):  # alternating, so that a load on the machine hits both sides alike
        timings["numpy_load"].append(best_seconds(lambda: np.load(npy), 1))
        timings["read_layer"].append(best_seconds(read, 1))
        timings["numpy_load_stored"].append(best_seconds(lambda: np.load(npy_stored), 1))
        timings["read_layer_stored"].append(best_seconds(lambda: read(None), 1))
    best = {name: min(values) for name, values in timings.items()}
    npy.unlink()
    npy_stored.unlink()
    return {
        "layer_mb": round(reference.nbytes / 1e6, 1), **{k: round(v, 4) for k, v in best.items()},
        "read_vs_numpy": round(best["numpy_load"] / best["read_layer"], 3),
        "read_vs_numpy_stored": round(best["numpy_load_stored"] / best["read_layer_stored"], 3),
        "read_extra_mb": round(peak_extra_bytes(read) / 1e6, 1),
    }


def measure_store(args: argparse.Namespace) -> None:
    """--store: each layer (or --layer) of an existing store."""
    with FeatureStore(args.store) as store:
        layers = range(store.num_layers) if args.layer is None else [args.layer]
        shape, dtype = (store.num_rows, store.hidden_size), store.file["features"].dtype
    with tempfile.TemporaryDirectory() as folder:
        results = [{"layer": layer, **compare(args.store, layer, Path(folder), args.repeats)} for layer in layers]
    print(f"\n{args.store}: {shape[0]} contexts x {shape[1]} dims, {dtype}; best of {args.repeats}, page cache")
    print(f"{'layer':<7}{'layer MB':>9}{'np.load s':>11}{'read_layer s':>14}{'ratio':>7}{'(stored dtype) ratio':>22}"
          f"{'extra MB':>10}")
    for row in results:
        print(f"{row['layer']:<7}{row['layer_mb']:>9}{row['numpy_load']:>11.3f}{row['read_layer']:>14.3f}"
              f"{row['read_vs_numpy']:>7.2f}{row['read_vs_numpy_stored']:>22.2f}{row['read_extra_mb']:>10}")
    write_json(args, results)
    print(f"read_vs_numpy={min(row['read_vs_numpy'] for row in results):.2f}")


def write_json(args: argparse.Namespace, results: list[dict]) -> None:
    if args.json:
        options = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
        write_json_atomically(args.json, {"args": options, "results": results})


def main() -> None:
    args = parse_args()
    if args.store:
        measure_store(args)
        return
    with tempfile.TemporaryDirectory() as folder:
        results = [measure(Path(folder), args, dtype) for dtype in ("float16", "float32")]
        results.append(measure(Path(folder), args, "float16", shuffled=True))
    print(f"\n{args.rows} contexts x {args.layers} layers x {args.dim} dims; best of {args.repeats}, page cache")
    print(f"{'storage':<9}{'rows':<10}{'layer MB':>9}{'np.load s':>11}{'read_layer s':>14}{'ratio':>7}"
          f"{'(stored dtype) ratio':>22}{'extra MB':>10}{'MB / 1M ctx / layer':>21}")
    for row in results:
        print(f"{row['dtype']:<9}{row['layout']:<10}{row['layer_mb']:>9}{row['numpy_load']:>11.3f}{row['read_layer']:>14.3f}"
              f"{row['read_vs_numpy']:>7.2f}{row['read_vs_numpy_stored']:>22.2f}{row['read_extra_mb']:>10}"
              f"{row['mb_per_million_contexts_per_layer']:>21}")
    write_json(args, results)
    print(f"read_vs_numpy={results[0]['read_vs_numpy']:.2f}")


if __name__ == "__main__":
    main()
