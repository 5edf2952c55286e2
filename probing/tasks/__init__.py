"""One module per entry script (`probe.py` -> `probing.tasks.probe.run`); nothing below this package imports it."""

from probing.cli import JOB_CHECKS
from probing.config import register_resolvers
from probing.features.finetuned import comparison_setups, setup_model, setup_reuse
from probing.tasks.probe import chosen_representation

# The resolvers of the fine-tuned comparison (conf/experiment/zhao2020_fig6.yaml), beside the config's own.
register_resolvers(comparison_setups=lambda entries: ",".join(comparison_setups(entries)),
                   comparison_model=setup_model, comparison_reuse=setup_reuse)
# What a sweep checks of each probe.py job before the first one runs: the representation its settings name.
JOB_CHECKS["probe"] = chosen_representation
