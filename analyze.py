"""Analyses that train nothing: `python analyze.py analysis=attention_similarity compare_to=<train run>/model`
(Zhao et al. 2020 Fig. 7; see README)."""

import hydra
from omegaconf import DictConfig

from probing.cli import launcher_installed, user_errors_exit_cleanly
from probing.config import CONFIG_DIR
from probing.tasks import analyze


@launcher_installed
@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="analyze")
@user_errors_exit_cleanly
def main(cfg: DictConfig) -> None:
    analyze.run(cfg)


if __name__ == "__main__":
    main()
