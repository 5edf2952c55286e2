"""Analyses that train nothing: `python analyze.py analysis=attention_similarity compare_to=<train run>/model`
(Zhao et al. 2020 Fig. 7; see README)."""

from pathlib import Path

from probing.console import JOBS, entry_point

# The configs, beside this script (an installed package reads its own copy: probing.console).
main = entry_point("analyze", JOBS["analyze"], config_path=str(Path(__file__).resolve().parent / "conf"))

if __name__ == "__main__":
    main()
