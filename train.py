"""Fine-tune an encoder on a task: `python train.py task=pos` (POS, NER, SST-2, MRPC; see README)."""

import hydra
from omegaconf import DictConfig

from probing.cli import launcher_installed, user_errors_exit_cleanly
from probing.config import CONFIG_DIR
from probing.tasks import train


@launcher_installed
@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
@user_errors_exit_cleanly
def main(cfg: DictConfig) -> float:
    """Returns `optimized_metric` of the run (the task's monitored dev metric by default) to a Hydra sweeper."""
    results = train.run(cfg)
    return results["dev"][str(cfg.optimized_metric).removeprefix("dev/")]


if __name__ == "__main__":
    main()
