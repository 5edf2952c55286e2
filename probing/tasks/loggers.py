"""The job's Lightning loggers: built from `logger`, a W&B logger checked against its server (offline when it cannot
be reached), and closed in `finally` however the job ends (the W&B run of the process finished with them)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any

from lightning.pytorch.loggers import Logger, WandbLogger
from omegaconf import DictConfig, open_dict

from probing.config import build, wandb_offline, wandb_online_asked
from probing.errors import ConfigError

log = logging.getLogger(__name__)

WANDB_SERVER = "https://api.wandb.ai"  # wandb's default base URL (WANDB_BASE_URL changes it)
WANDB_CONNECT_TIMEOUT_S = 3.0  # how long a run waits to learn that the W&B server cannot be reached


def name_the_run(cfg: DictConfig, name: str, group: str) -> None:
    """Give the W&B logger of `logger` (logger=wandb or logger=default) the run's name and group where its config
    leaves them null: each job names its runs from the settings it knows (probe.py: model-data-layer<layer>-probe-seed
    <seed>), before the config is recorded, so that results.json's config holds the name W&B shows.
    `logger.wandb.name=...` on the command line names a run otherwise."""
    for node in (cfg.get("logger") or {}).values():
        if isinstance(node, DictConfig) and is_wandb(node):
            with open_dict(node):
                node.name = name if node.get("name") is None else node.name
                node.group = group if node.get("group") is None else node.group


def is_wandb(node: DictConfig) -> bool:
    return str(node.get("_target_", "")).rsplit(".", 1)[-1] == WandbLogger.__name__


def build_loggers(logger: DictConfig | None) -> list[Logger]:
    """The Lightning loggers of `logger` (one per entry; none for null or {}); a W&B logger whose `offline` is null
    logs offline unless the environment holds a key or asks for online mode (`probing.config.wandb_offline`)."""
    loggers = [build(node, f"logger.{name}", **offline_unless_set(node)) for name, node in (logger or {}).items()]
    for built in loggers:
        if isinstance(built, WandbLogger):
            without_unset_anonymous(built)
            offline_when_unreachable(built)
    return loggers


def offline_unless_set(node: DictConfig) -> dict[str, bool]:
    return {"offline": wandb_offline()} if is_wandb(node) and node.get("offline") is None else {}


def offline_when_unreachable(logger: WandbLogger) -> None:
    """A W&B logger about to log online, checked against the server first, so that a run on a machine without network
    neither waits for wandb's own time-out (about two minutes) nor dies after it. Online because the user asked
    (WANDB_MODE=online): the unreachable server is a ConfigError. Online only because a key is set: the run logs
    offline instead (`wandb sync` uploads it later), with a warning."""
    if logger._offline:
        return
    problem = wandb_server_problem(os.environ.get("WANDB_BASE_URL") or WANDB_SERVER)
    if problem is None:
        return
    if wandb_online_asked():
        raise ConfigError(f"WANDB_MODE=online, but the W&B server cannot be reached ({problem}). Fix: WANDB_MODE="
                          "offline (upload the run later with `wandb sync`), or logger=csv")
    log.warning("WANDB_API_KEY is set, but the W&B server cannot be reached (%s): this run logs to W&B offline, into "
                "its folder (upload it later with `wandb sync`). WANDB_MODE=offline skips this check, "
                "WANDB_MODE=online makes an unreachable server an error", problem)
    logger._offline = True


@functools.lru_cache(maxsize=8)
def wandb_server_problem(base_url: str) -> str | None:
    """Why the W&B server at `base_url` (or the HTTPS/HTTP proxy the environment names for it) cannot be reached: a
    TCP connection tried for WANDB_CONNECT_TIMEOUT_S; None when it connects. Checked once per process and URL (the
    jobs of a sweep share the answer)."""
    url = urllib.parse.urlsplit(base_url)
    proxy = urllib.request.getproxies().get(url.scheme or "https")
    target = urllib.parse.urlsplit(proxy) if proxy and not urllib.request.proxy_bypass(url.hostname or "") else url
    host, port = target.hostname, target.port or (80 if target.scheme == "http" else 443)
    if not host:
        return f"{base_url} names no host"
    try:
        socket.create_connection((host, port), timeout=WANDB_CONNECT_TIMEOUT_S).close()
    except OSError as error:
        via = f" through the proxy {host}:{port}" if target is not url else f" at {host}:{port}"
        return f"no connection{via}: {error.strerror or error}"
    return None


def without_unset_anonymous(logger: WandbLogger) -> None:
    """Leave wandb's deprecated `anonymous` setting out of `wandb.init` when nobody set it: Lightning's WandbLogger
    passes `anonymous=None` always, and wandb (since it deprecated the setting) then warns on every run."""
    if getattr(logger, "_wandb_init", {}).get("anonymous", "set") is None:
        del logger._wandb_init["anonymous"]


@contextlib.contextmanager
def closing_loggers(logger: DictConfig | None) -> Iterator[list[Logger]]:
    """The job's loggers, built once from `logger` (the job hands them to `build_trainer`, or logs through them
    itself), and closed in `finally` however the job ends: each logger finalized ("success", or "failed" when the
    job raised), then the W&B run finished, so that a failed job of a sweep does not leave its run open for the next
    job to log into (W&B keeps one run per process). A logger that fails to close does not keep the others open."""
    loggers = build_loggers(logger)
    failed = True
    try:
        yield loggers
        failed = False
    finally:
        close_loggers(loggers, failed)


def close_loggers(loggers: Iterable[Logger], failed: bool) -> None:
    """Finalize each logger, then finish the W&B run of this process; the first error of a logger is raised at the
    end, unless the job already failed (its own error is the one to see)."""
    errors = []
    for each in loggers:
        try:
            each.finalize("failed" if failed else "success")
        except Exception as error:  # the other loggers must still be closed
            log.warning("logger %s did not close: %s", type(each).__name__, error)
            errors.append(error)
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=1 if failed else 0)
    if errors and not failed:
        raise errors[0]


def summarise_in_wandb(loggers: Iterable[Logger], summary: dict[str, Any]) -> None:
    """Put a run's final values in the summary of its W&B run (the run is finished by `closing_loggers`)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.summary.update(summary)
