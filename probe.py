"""S-class probing of one encoder layer: `python probe.py model=minilm data=streusle layer=6` (see README)."""

import hydra
from omegaconf import DictConfig

from probing.cli import launcher_installed, user_errors_exit_cleanly
from probing.config import CONFIG_DIR
from probing.tasks import probe


@launcher_installed
@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="probe")
@user_errors_exit_cleanly
def main(cfg: DictConfig) -> float:
    """Returns `optimized_metric` of the run (dev micro-F1 by default) to a Hydra sweeper."""
    return probe.optimized_value(probe.run(cfg), cfg.optimized_metric)


if __name__ == "__main__":
    main()
