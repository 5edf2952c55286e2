"""Fill the HDF5 feature store for every split of a data set: `python extract.py model=minilm data=streusle`."""

import hydra
from omegaconf import DictConfig

from probing.cli import launcher_installed, user_errors_exit_cleanly
from probing.config import CONFIG_DIR
from probing.tasks import extract


@launcher_installed
@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="extract")
@user_errors_exit_cleanly
def main(cfg: DictConfig) -> None:
    extract.run(cfg)


if __name__ == "__main__":
    main()
