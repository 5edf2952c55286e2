"""Fill the HDF5 feature store for every split of a data set: `python extract.py model=minilm data=streusle`."""

from pathlib import Path

from probing.console import JOBS, entry_point

# The configs, beside this script (an installed package reads its own copy: probing.console).
main = entry_point("extract", JOBS["extract"], config_path=str(Path(__file__).resolve().parent / "conf"))

if __name__ == "__main__":
    main()
