"""What the analyses of analyze.py share: the `Analysis` base class of their components (one per
conf/analysis/<name>.yaml, built from its `_target_`), what they read from the top level of the composed config
(`AnalysisInputs`: the model, `layer`, `compare_to`, the stores' folder), the sentences they run on and their device.

An analysis lives in the wing it belongs to (geometry/, probes/, finetune/), so its base lives here, below the wings,
where each of them may import it. docs/development.md, "Adding an analysis", has
the recipe: a component module, a report section module, a config."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from hydra.utils import get_class
from omegaconf import DictConfig

from probing.config import build
from probing.data.sentences import Text, texts_of
from probing.data.settings import optional_int, require_bool, require_int
from probing.errors import ConfigError, setting, settings_named, settings_under
from probing.features.encoder import resolve_device

# The keys that the data sources' errors name (probe.py's and train.py's `data`), as analysis.sentences holds them.
SENTENCES_SETTINGS = {"data.data_dir": "analysis.sentences.data_dir", "data.source.": "analysis.sentences."}


@dataclass(frozen=True)
class ModelSettings:
    """The `model` an analysis reads: its name (in the results and logs), where it is loaded from (a GGUF file's
    name and its conversion cache included), and whether its weights are replaced by a random initialisation drawn
    with `init_seed`. Analyses load the weights in float32 on one device: another `dtype` or a `device_map` is
    refused rather than ignored."""

    name: Any
    name_or_path: Any
    revision: str | None = None
    random_init: bool = False
    init_seed: int = 0
    gguf_file: str | None = None
    cache_dir: str | None = None

    @classmethod
    def of(cls, model: DictConfig) -> ModelSettings:
        for key, honoured in (("dtype", (None, "fp32")), ("device_map", (None,))):
            if model.get(key) not in honoured:
                raise ConfigError(f"model.{key}={model.get(key)}: analyze.py loads the model in float32 on one device "
                                  f"and would not honour it. Fix: model.{key}=null")
        return cls(model.name, model.name_or_path, model.get("revision"),
                   require_bool("model.random_init", model.get("random_init", False)),
                   require_int("model.init_seed", model.get("init_seed", 0)),
                   model.get("gguf_file"), model.get("cache_dir"))

    def load_arguments(self) -> dict[str, Any]:
        """The arguments of `load_pretrained` that say which weights to read."""
        return {"revision": self.revision, "random_init": self.random_init, "init_seed": self.init_seed,
                "gguf_file": self.gguf_file, "cache_dir": self.cache_dir}

    def described(self) -> dict[str, Any]:
        """The first keys of every analysis's results."""
        return {"model": self.name, "model_name_or_path": self.name_or_path, "random_init": self.random_init}


@dataclass(frozen=True)
class AnalysisInputs:
    """What an analysis reads besides its own settings: `model`, `layer` (null, or the value given: an analysis that
    reads it resolves it with probing.features.layers.resolve_layer), `compare_to` and `paths.store_dir`."""

    model: ModelSettings
    layer: Any = None
    compare_to: Any = None
    store_dir: Any = None


class Analysis(ABC):
    """An analysis of analyze.py, built by `probing.config.build` from conf/analysis/<name>.yaml with `sentences`
    unbuilt (built here, so that its errors name `analysis.sentences`). A subclass sets `report` (its probing.report
    section module: `ANALYSIS`, its name, and `SECTION`, which renders its runs), says whether `run` reads the
    top-level `layer` (`instead_of_layer`), checks its own settings in its constructor (ConfigError naming
    `analysis.<key>`), and implements `run` and `metrics`."""

    report: ModuleType
    # The top-level `layer`: None when `run` reads it; otherwise what the analysis measures instead and the fix
    # (`{layer}`: the value given), for the one-line refusal of a `layer=` that nothing would read.
    instead_of_layer: tuple[str, str] | None = ("it measures no single hidden state", "leave layer unset (layer=null)")
    # The constructor's arguments that analyze.py passes from what the job knows (the word task of `task=`, the
    # features of probe.py, the seed: analyze.py's `job_settings`), where the analysis's config leaves them out.
    from_the_job: tuple[str, ...] = ()

    def __init__(self, name: str, sentences: dict[str, Any], split: str, max_sentences: int | None):
        if name != self.name:
            raise ConfigError(f"{setting('name')}={name!r} is no analysis of {type(self).__name__}, whose runs are "
                              f"named {self.name!r} in results and reports. Fix: choose an analysis with "
                              f"analysis=<name> (conf/analysis/<name>.yaml) and leave {setting('name')} as it is")
        self.max_sentences = optional_int(setting("max_sentences"), max_sentences, minimum=1,
                                          null="every sentence of the split")
        self.sentences = build(sentences, "analysis.sentences")
        self.split = split

    @property
    def name(self) -> str:
        """Its config's `name` and the "analysis" of its results: the `ANALYSIS` of its report section."""
        return self.report.ANALYSIS

    def check_inputs(self, inputs: AnalysisInputs) -> None:
        """Refuse, before any work, a `layer=` that `run` would not read (see `instead_of_layer`)."""
        if self.instead_of_layer is not None and inputs.layer is not None:
            instead, fix = self.instead_of_layer
            raise ConfigError(f"layer={inputs.layer}: analysis={self.name} does not read `layer` ({instead}). "
                              f"Fix: {fix.format(layer=inputs.layer)}")

    @abstractmethod
    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        """The results of the analysis (its "analysis" name aside); its own files are written into `run_dir`."""

    @abstractmethod
    def metrics(self, results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """The (step, scalars) of `results` that analyze.py logs (values that are no numbers are left out there)."""

    def load_sentences(self) -> Any:
        """The data of `analysis.sentences`; its errors name the keys under analysis.sentences (SENTENCES_SETTINGS,
        and the settings it marks as parts of the argument `sentences`)."""
        with settings_named(SENTENCES_SETTINGS), settings_under("sentences"):
            return self.sentences.load()

    def texts(self) -> tuple[list[Text], str]:
        """The texts of `analysis.sentences`, split `analysis.split` (its first `analysis.max_sentences`), and a
        label of where they are from."""
        data = self.load_sentences()
        return texts_of(data, self.split, self.max_sentences), f"{data.name} {self.split}"


def build_analysis(analysis: DictConfig, **known: Callable[[], Any]) -> Analysis:
    """The component of the `analysis` config, its settings checked, built with the values of `known` (what the job
    knows, each computed when asked for) that its class takes from the job (`Analysis.from_the_job`) and its config
    leaves out."""
    try:
        wanted = get_class(analysis._target_).from_the_job
    except Exception:  # no analysis class: `build` says what is wrong with the config
        wanted = ()
    return build(analysis, "analysis", _recursive_=False,
                 **{key: known[key]() for key in wanted if key in known and key not in analysis})


def analysis_device(device: str, key: str = "analysis.device") -> torch.device:
    """The setting `key` (`analysis.device`, `erase.device`) as a torch device that this machine has."""
    try:
        resolved = resolve_device(str(device))
    except RuntimeError as error:
        raise ConfigError(f"{key}={device} is not a device ({error}). Fix: {key}=auto, cpu or cuda") from error
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}={device}, but this machine has no CUDA GPU. Fix: {key}=auto")
    return resolved
