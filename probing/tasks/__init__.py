"""One module per entry script (`probe.py` -> `probing.tasks.probe.run`); nothing below this package imports it."""

from probing.config import register_resolvers
from probing.features.finetuned import comparison_setups, setup_model, setup_reuse
from probing.probes.representations import conditioning_of, representation_of

# The resolvers of the fine-tuned comparison (conf/experiment/zhao2020_fig6.yaml) and of the representation probed
# and conditioned on (conf/probe.yaml), beside the config's own.
register_resolvers(comparison_setups=lambda entries: ",".join(comparison_setups(entries)),
                   comparison_model=setup_model, comparison_reuse=setup_reuse, representation_of=representation_of,
                   conditioning_of=conditioning_of)
