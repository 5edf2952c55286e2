"""Logging of the entry scripts. Every module logs to `logging.getLogger(__name__)`, so all of it sits under the
`probing` logger (Hydra's job logging prints it and writes it to the run folder). Library noise that says nothing
about the run is dropped, and in a multi-process run (DDP) only the process of rank 0 logs below warnings: the other
ranks would repeat every line."""

from __future__ import annotations

import logging
import os
import warnings

from lightning.fabric.utilities.rank_zero import rank_zero_only

# Library noise that says nothing about the run: a deprecation inside Lightning's own code, and the advertisement
# Lightning logs once per Trainer for its cloud logger.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


class DropLightningTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


# Lightning's rank-zero messages go to one of these two loggers, whichever of its packages was imported last.
for _name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
    logging.getLogger(_name).addFilter(DropLightningTip())


def process_rank() -> int:
    """This process's global rank: Lightning's (set when DDP starts, and from the launcher's environment when
    Lightning is imported), else the launcher's RANK or LOCAL_RANK variable, else 0."""
    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:
        rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
    try:
        return int(rank)
    except ValueError:
        return 0


def quiet_on_other_ranks() -> None:
    """Keep info messages to the process of rank 0 (Lightning sets the rank from the launcher's environment)."""
    if process_rank() != 0:
        logging.getLogger("probing").setLevel(logging.WARNING)
