"""`bench/probe.py --trainer`: a `probe.py` epoch through Lightning against a bare torch loop over the same
datamodule's batches with a copy of the same module and its optimizer (see bench/probe.py's docstring); and the
composed probe config and inputs that both modes of bench/probe.py start from."""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import lightning
import torch
from hydra import compose, initialize_config_dir

from probing.probes.sclass_probe import SClassProbe
from probing.tasks.loggers import build_loggers
from probing.tasks.probe import built_probing, chosen_representation
from probing.tasks.settings import store_settings, with_data_settings, with_run_folders
from probing.tasks.trainer import build_trainer

# The configs of the entry scripts (the repository's conf/).
CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "conf")

TARGET_LIGHTNING = 1.15  # probe.py epoch / bare loop epoch


def probe_inputs(cfg):
    """The inputs of probe.py's s-class run of `cfg` (its stores filled, its datamodule built), as the pipeline makes
    them."""
    probing = built_probing(cfg)
    return probing.inputs(chosen_representation(cfg)(), store_settings(cfg.features))


def probe_config(args: argparse.Namespace, control: bool = False):
    overrides = [f"model.name_or_path={args.model}", f"layer={args.layer}",
                 f"probe.control_task.enabled={str(control).lower()}", *args.override]
    if args.store_dir:
        overrides.append(f"paths.store_dir={args.store_dir}")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return with_data_settings(with_run_folders(compose(config_name="probe", overrides=overrides)))


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """What Lightning's bf16-mixed does around a training step; nothing at 32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


class EpochClock(lightning.Callback):
    """The start time of every training epoch (an epoch's time then includes its validation)."""

    def __init__(self):
        self.starts: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.starts.append(time.perf_counter())

    def on_train_end(self, trainer, pl_module) -> None:
        self.starts.append(time.perf_counter())


def lightning_epochs(cfg, module: SClassProbe, datamodule) -> list[float]:
    clock = EpochClock()
    trainer = build_trainer(cfg, [clock], loggers=build_loggers(cfg.get("logger")))
    trainer.fit(module, datamodule=datamodule)
    return [end - start for start, end in zip(clock.starts, clock.starts[1:])]


@contextlib.contextmanager
def quiet_logging() -> Iterator[None]:
    """A module outside a Trainer warns at every `self.log`; the bare loop logs nothing."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")
        yield


def bare_epochs(module: SClassProbe, datamodule, epochs: int, precision: str) -> list[float]:
    """The same work as a Lightning epoch, in a plain loop: train on every batch, then score the dev split."""
    optimizer = module.configure_optimizers()
    device = next(module.parameters()).device
    seconds = []
    with quiet_logging():
        for _ in range(epochs):
            started = time.perf_counter()
            module.train()
            for index, batch in enumerate(datamodule.train_dataloader()):
                optimizer.zero_grad(set_to_none=True)
                with autocast(device, precision):
                    loss = module.training_step(batch, index)
                loss.backward()
                optimizer.step()
            module.eval()
            with torch.no_grad():
                for index, batch in enumerate(datamodule.val_dataloader()):
                    module.validation_step(batch, index)
                module.on_validation_epoch_end()
            seconds.append(time.perf_counter() - started)
    return seconds


def benchmark_trainer(args: argparse.Namespace) -> None:
    """Lightning's per-epoch overhead over a bare loop (module docstring)."""
    precision = {"32": "32-true", "bf16": "bf16-mixed"}[args.precision]
    args.override = [f"trainer.max_epochs={args.epochs}", f"trainer.precision={precision}",
                     f"trainer.accelerator={args.device}", f"probe.batch_size={args.batch_size[0]}",
                     f"paths.output_dir={tempfile.mkdtemp(prefix='bench-probe-')}", *args.override]
    cfg = probe_config(args, control=True)
    inputs = probe_inputs(cfg)
    torch.manual_seed(args.seed)
    template = SClassProbe.from_settings(labels=list(inputs.classes), input_dim=inputs.datamodule.feature_dim,
                                         hidden_dim=args.hidden_dim, control=True)
    lightning_seconds, bare_seconds = [], []
    for _ in range(args.rounds):
        lightning_seconds += lightning_epochs(cfg, copy.deepcopy(template), inputs.datamodule)[1:]
        bare_seconds += bare_epochs(copy.deepcopy(template).to(args.device), inputs.datamodule, args.epochs,
                                    args.precision)[1:]
    lightning_median, bare_median = statistics.median(lightning_seconds), statistics.median(bare_seconds)
    steps = len(inputs.datamodule.train_dataloader())
    print(f"\n{args.model} layer {args.layer}, control task on, {steps} training steps per epoch, precision "
          f"{args.precision}, {args.rounds} x {args.epochs} epochs per side (medians of epochs 2..{args.epochs}), "
          f"torch threads {torch.get_num_threads()}")
    print(f"lightning epoch {lightning_median:.3f} s (min {min(lightning_seconds):.3f}), bare loop epoch "
          f"{bare_median:.3f} s (min {min(bare_seconds):.3f}); target <= {TARGET_LIGHTNING}x")
    print(f"lightning_vs_bare={lightning_median / bare_median:.2f}")
