"""Fine-tune an encoder on a task: `python train.py task=pos` (POS, NER, SST-2, MRPC; see README)."""

from pathlib import Path

from probing.console import JOBS, entry_point

# The configs, beside this script (an installed package reads its own copy: probing.console).
main = entry_point("train", JOBS["train"], config_path=str(Path(__file__).resolve().parent / "conf"))

if __name__ == "__main__":
    main()
