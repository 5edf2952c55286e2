"""DDP plumbing of a job: the processes Lightning starts run this job only (in a multirun too), and a job leaves no
DDP state behind for the next job of a multirun in the same process."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from probing.tasks.settings import in_multirun

# What Lightning's DDP launcher writes into the launching process's environment.
DDP_ENVIRONMENT = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


def keep_ddp_processes_on_this_job() -> None:
    """Lightning's DDP launcher starts the other processes with this process's command line (sys.argv) and Hydra's
    `hydra.run.dir`. In a multirun job that command is the whole sweep, which every child would run again: point
    both at this job (its overrides, its folder, a single run) before Lightning starts them."""
    if not in_multirun():
        return
    hydra_cfg = HydraConfig.instance().cfg.hydra
    sys.argv = [sys.argv[0], *hydra_cfg.overrides.task, "hydra.mode=RUN"]
    OmegaConf.set_readonly(hydra_cfg, False)
    hydra_cfg.run.dir = hydra_cfg.runtime.output_dir
    OmegaConf.set_readonly(hydra_cfg, True)


@contextlib.contextmanager
def distributed_state_of_this_job() -> Iterator[None]:
    """Leave no DDP state behind for the next job of a multirun, which runs in the same process: Lightning's launcher
    sets the rendezvous variables in this process's environment (the next job would take itself for a child started
    by someone else) and the process group stays open (with peers that have exited)."""
    saved = {name: os.environ.get(name) for name in DDP_ENVIRONMENT}
    try:
        yield
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
