"""What `erase=` asks for (conf/erase/<method>.yaml, built by Hydra): the concept to erase, the eraser that fits it
(one method a module of probing.erasure), a fitted eraser to apply instead of fitting one, and the seed of the random
control of the same rank that every erasure is measured against. probe.py and the amnesic analysis
(`probing.finetune.amnesic`) both read it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probing.analysis import analysis_device
from probing.data.settings import require_int
from probing.erasure.file import ERASER_FILE
from probing.errors import ConfigError, setting


class ErasureSetup:
    """`eraser`: the fitting method (a `ConceptEraser`); `concept`: the word task whose labels are erased (None: the
    probed task's own, `probing.data.concepts`); `path`: an eraser file saved by an earlier run, applied instead of
    fitting (refused when it was fitted on other features); `control_seed`: the seed of the random control;
    `fresh_probe_epochs`: the epochs of the fresh probes of the guardedness report; `device`: where the eraser and
    its control are fitted and applied (auto: cuda when this machine has one; the fitted erasers are kept, saved and
    measured on the CPU). `path`, `control_seed` and `fresh_probe_epochs` are probe.py's own (conf/probe.yaml): the
    amnesic analysis's config does not hold them, and its node builds with their defaults."""

    def __init__(self, eraser: Any, concept: str | None = None, path: str | None = None, control_seed: int = 0,
                 fresh_probe_epochs: int = 20, device: str = "auto"):
        if not callable(getattr(eraser, "fit", None)):
            raise ConfigError(f"erase.eraser must build an eraser (a _target_ of probing.erasure), got "
                              f"{eraser!r}. Fix: erase=leace, inlp, mean_projection or random")
        if concept is not None and (not isinstance(concept, str) or not concept):
            raise ConfigError(f"{setting('concept')}={concept!r} is not a task name. Fix: {setting('concept')}=upos "
                              "(or null: the probed task's own labels)")
        self.eraser, self.concept = eraser, concept
        self.path = None if path is None else saved_eraser_file(Path(path))
        self.control_seed = require_int(setting("control_seed"), control_seed)
        self.fresh_probe_epochs = require_int(setting("fresh_probe_epochs"), fresh_probe_epochs, minimum=1)
        self.device = analysis_device(device, key="erase.device")

    @property
    def method(self) -> str:
        return str(self.eraser.method)


def saved_eraser_file(path: Path) -> Path:
    """The setting `path`, refused unless it is a file: the ERASER_FILE that probe.py wrote into an erasure run's
    folder."""
    key = setting("path")
    if path.is_dir():
        inside = path / ERASER_FILE
        fix = f"{key}={inside}" if inside.is_file() else f"{key}=<erasure run folder>/{ERASER_FILE}"
        raise ConfigError(f"{key}={path} is a folder, but a file is expected: the {ERASER_FILE} that probe.py "
                          f"saves in the folder of an erasure run. Fix: {fix}, or {key}=null to fit one")
    if not path.is_file():
        raise ConfigError(f"{key}={path}: no such file. Fix: the {ERASER_FILE} of an earlier erasure run, or "
                          f"{key}=null to fit one")
    return path


# erase=none's settings (conf/erase/none.yaml: those of the erasers; in probe.py, also conf/probe.yaml's) and their
# values there.
UNSET_ERASURE = {"concept": None, "path": None, "control_seed": 0, "fresh_probe_epochs": 20, "device": "auto"}


def no_erasure(**settings: Any) -> None:
    """erase=none (conf/erase/none.yaml): nothing is erased, and a setting of the erasers changed without an eraser
    (a concept, an eraser file, a control seed, ...) is refused rather than ignored, the first in UNSET_ERASURE's
    order (the node's order depends on which config file holds a setting)."""
    for key in settings:
        if key not in UNSET_ERASURE:
            raise ConfigError(f"erase.{key}: erase=none has no such setting. Fix: leave it out")
    for key, unset in UNSET_ERASURE.items():
        if key in settings and settings[key] != unset:
            raise ConfigError(f"erase.{key}={settings[key]} is set, but erase=none erases nothing. Fix: erase=leace "
                              f"(or inlp, mean_projection, random), or erase.{key}={none_value(unset)}")
    return None


def none_value(value: Any) -> str:
    return "null" if value is None else str(value)
