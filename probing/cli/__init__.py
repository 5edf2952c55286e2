"""What every entry script shares around Hydra: the check of its command line before Hydra runs it (`command_line`,
through Hydra's public API only, `compose`, `launchers`), user errors as one clear message without a traceback
(`exits`), the check of a sweep before its first job (`sweep_check`), and logging (`logs`)."""

from probing.cli.command_line import check_command_line, command_line_checked
from probing.cli.compose import HYDRA_VERSION_BASE, app_config_loader
from probing.cli.exits import exit_with, probing_cause, user_errors_exit_cleanly
from probing.cli.launchers import own_launcher_configs
from probing.cli.logs import process_rank
from probing.cli.sweep_check import JOB_CHECKS, SweepCheck

__all__ = ["HYDRA_VERSION_BASE", "JOB_CHECKS", "SweepCheck", "app_config_loader", "check_command_line",
           "command_line_checked", "exit_with", "own_launcher_configs", "probing_cause", "process_rank",
           "user_errors_exit_cleanly"]
