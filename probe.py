"""S-class probing of one encoder layer: `python probe.py model=minilm data=streusle layer=6` (see README)."""

from pathlib import Path

from probing.console import JOBS, entry_point

# The configs, beside this script (an installed package reads its own copy: probing.console).
main = entry_point("probe", JOBS["probe"], config_path=str(Path(__file__).resolve().parent / "conf"))

if __name__ == "__main__":
    main()
