"""What a job returns to a Hydra sweeper: the run's `optimized_metric`."""

from __future__ import annotations

import math
from typing import Any

from probing.errors import ConfigError


def optimized_value(results: dict[str, Any], metric: str) -> float:
    """The `optimized_metric` ("dev/micro_f1", "test/selectivity", "dev/accuracy", ...) of a run's results, for a Hydra
    sweeper; NaN where the run recorded that score as undefined (null: its warnings say why)."""
    split, _, name = str(metric).partition("/")
    block = results.get(split)
    if isinstance(block, dict) and name in block and block[name] is None:
        return math.nan
    value = block.get(name) if isinstance(block, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"optimized_metric={metric} is not a score of this run. Fix: <split>/<score>, e.g. "
                          "dev/micro_f1 or dev/selectivity for probe.py (the control task must be on for selectivity), "
                          "the task's monitor (task.monitor) for train.py")
    return float(value)
