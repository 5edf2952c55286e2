"""Hydra/OmegaConf glue: building objects from `_target_` configs, custom resolvers used by the configs in conf/
(where the configs are is the entry scripts' business: they hand it to Hydra), and what a run's resolved config says
apart from where the run was written (`location_free`), by which a relaunched run recognises its own results and
checkpoints, also in a folder that was moved."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from probing.errors import ConfigError, ProbingError


def build(node: DictConfig, key: str, settings_from: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate(node, **kwargs)` (plain containers for the arguments), with the errors a user can fix
    kept as they are: Hydra wraps whatever a constructor raises, which would turn a one-line ProbingError into a
    traceback. The settings a ConfigError names by argument name (`probing.errors.setting`) are named by the user's
    key path (`setting_key`), also when a `_partial_` node's object is made later, from the partial; an argument that
    the job passes (`kwargs`) is named by its key in `settings_from` (argument -> the key path the user sets). Any
    other failure to build is a ConfigError naming the config key `key`."""
    try:
        built = instantiate(node, _convert_="all", **kwargs)
        if isinstance(built, functools.partial):
            return functools.partial(call_keyed, built, node, key, settings_from or {})
        return built
    except InstantiationException as error:
        cause = error.__cause__
        while isinstance(cause, InstantiationException):
            cause = cause.__cause__
        if isinstance(cause, ConfigError):
            raise keyed(cause, node, key, inner_path(error, node), settings_from or {}) from None
        if isinstance(cause, ProbingError):
            raise cause from None
        first_line = str(cause or error).strip().splitlines()[-1]
        key = nested_key(error, key)
        raise ConfigError(f"{key}: cannot be built ({first_line}). Fix: check the values under `{key}` "
                          "(python probe.py --cfg job shows the composed config)") from error


@contextlib.contextmanager
def keyed_errors(node: Any, key: str, settings_from: Mapping[str, str] | None = None) -> Iterator[None]:
    """A ConfigError raised inside by the object built from the node at `key` (its checks or its work, after `build`)
    names the settings it marks by the user's key paths, as `build` does (`keyed`)."""
    try:
        yield
    except ConfigError as error:
        raise keyed(error, node, key, settings_from=settings_from) from None


def nested_key(error: InstantiationException, key: str) -> str:
    """The key of the node that failed to build inside the one built at `key` (Hydra names it `full_key: <key>.<...>`
    in its message), or `key` itself."""
    named = re.search(r"full_key: (\S+)", str(error))
    return named.group(1) if named and named.group(1).startswith(f"{key}.") else key


def call_keyed(make: Callable[..., Any], node: Any, key: str, settings_from: Mapping[str, str], *args: Any,
               **kwargs: Any) -> Any:
    """`make(*args, **kwargs)`, a ConfigError of it naming the key paths of the node at `key` (`keyed`)."""
    try:
        return make(*args, **kwargs)
    except ConfigError as error:
        raise keyed(error, node, key, settings_from=settings_from) from None


def inner_path(error: InstantiationException, node: Any) -> str:
    """The path inside `node` of the node that failed to build (Hydra names its `full_key` in its message: the key
    from the root of `node`'s config), "" for `node` itself."""
    named = re.search(r"full_key: (\S+)", str(error))
    own = node._get_full_key(None) if isinstance(node, DictConfig) else ""  # a plain dict is a config's root
    if not named or named.group(1) == own:
        return ""
    if not own:
        return named.group(1)
    return named.group(1)[len(own) + 1:] if named.group(1).startswith(f"{own}.") else ""


def keyed(error: ConfigError, node: Any, key: str, inner: str = "",
          settings_from: Mapping[str, str] | None = None) -> ConfigError:
    """`error`, raised by the object built from the node at path `inner` under `node` (the node at `key`), with the
    settings it names written as the key paths of the user's config (`setting_key`)."""
    def key_of(name: str) -> str:
        argument, _, rest = name.partition(".")
        if not inner and settings_from and argument in settings_from:
            target = settings_from[argument]  # an argument's own settings: followed from the node at its key
            root = node._get_root() if isinstance(node, DictConfig) else None
            at = OmegaConf.select(root, target, throw_on_missing=False) if rest and root is not None else None
            return setting_key(at, target, rest) if rest else target
        return setting_key(node, key, f"{inner}.{name}" if inner else name)

    return error.renamed(key_of, final=True)


# A value that is another key's (`seed: ${seed}`, or `erase: ${oc.select:erase,null}`): the key.
INTERPOLATION = re.compile(r"\$\{(?:oc\.select:)?([\w.]+)(?:,[^{}]*)?\}")


def setting_key(node: Any, key: str, name: str) -> str:
    """The key path that the user sets the argument `name` (`seed`, or `split.seed` for an argument's own) of the object
    built from `node` at `key` by: `<key>.<name>`, or, where a value on the way is an interpolation (`split:
    ${data.split}`), the key it takes its value from (`data.split.seed`)."""
    for part in name.split("."):
        if isinstance(node, DictConfig) and part in node and OmegaConf.is_interpolation(node, part):
            target = INTERPOLATION.fullmatch(str(node._get_node(part)._value()))
            if target:
                key = target.group(1)
                node = OmegaConf.select(node._get_root(), key, throw_on_missing=False)
                continue
        key = f"{key}.{part}"
        node = node._get_node(part) if isinstance(node, DictConfig) and part in node else None
    return key


# The config group that says where things are (the launch directory, the log, store and run folders), not what a run
# computes (conf/paths/).
PATHS = "paths"
RUN_DIR = "<run folder>"  # what the run folder becomes inside the values of a location-free config


def location_free(config: Mapping[str, Any]) -> dict[str, Any]:
    """A resolved config without what depends on where the run was launched from and written to: the `paths` group
    left out, and the run folder (`paths.output_dir`) inside any string value (the checkpoint folder, a logger's
    save_dir, ...) written RUN_DIR. Two runs compute the same thing when these agree, so a run folder moved with its
    results and checkpoints is still the same run. What is written (results.json's `config`, the checkpoints'
    config.json) stays the resolved config: only comparisons use this."""
    paths = config.get(PATHS)
    run_dir = str((paths.get("output_dir") if isinstance(paths, Mapping) else None) or "").rstrip("/")
    # the folder itself, not a longer name beginning like it ("/runs/a" in "/runs/a/ckpt", not in "/runs/ab")
    in_text = re.compile(re.escape(run_dir) + r"(?![\w.-])") if run_dir else None

    def neutral(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: neutral(item) for key, item in value.items()}
        if isinstance(value, list):
            return [neutral(item) for item in value]
        return in_text.sub(RUN_DIR, value) if in_text and isinstance(value, str) else value

    return {key: neutral(value) for key, value in config.items() if key != PATHS}


def same_run(config: Any, other: Any) -> bool:
    """Whether two resolved configs (as recorded in results.json or beside checkpoints) are of the same run, wherever
    each was written (see `location_free`); a record that is not a config is no run's."""
    return isinstance(config, Mapping) and isinstance(other, Mapping) and location_free(config) == location_free(other)


def launch_dir() -> str:
    """The directory the command was started from (jobs never chdir: `hydra.job.chdir=false`)."""
    return os.getcwd()


def wandb_offline() -> bool:
    """W&B runs offline unless the user has a key in the environment or asked for online mode explicitly (and, with
    a key only, offline after all where the server cannot be reached: `probing.tasks.loggers.build_loggers`)."""
    if wandb_online_asked():
        return False
    if os.environ.get("WANDB_MODE", "").lower() in {"offline", "dryrun", "disabled"}:
        return True
    return not os.environ.get("WANDB_API_KEY")


def wandb_online_asked() -> bool:
    """Whether the user asked for W&B's online mode explicitly (WANDB_MODE=online or its old name, run)."""
    return os.environ.get("WANDB_MODE", "").lower() in {"online", "run"}


def layer_list(num_layers: int, *extra: str) -> str:
    """A sweep over every layer of a model and more: `${layers:7,mix}` -> "0,1,2,3,4,5,6,mix"
    (experiment presets sweep the layers of whichever model is chosen, `model.num_layers`)."""
    return ",".join([str(layer) for layer in range(int(num_layers))] + [str(item) for item in extra])


SHORT_OVERRIDE = 32  # characters of an override that a shortened job folder name keeps whole


def job_dir_name(overrides: str, max_length: int = 100) -> str:
    """A sweep job's folder, named after its overrides (`hydra.job.override_dirname`, e.g. "layer=3,seed=1"), so that
    a relaunched sweep finds each configuration's results where it left them; characters that are unsafe in a folder
    name become "_". A name over `max_length` keeps its short overrides ("layer=3", not the file lists beside it) and
    is tagged with a hash of the whole, which keeps the folders of different configurations apart."""
    name = folder_safe(overrides) or "defaults"
    if len(name) <= max_length:
        return name
    tag = hashlib.sha256(overrides.encode()).hexdigest()[:10]
    short = folder_safe(",".join(item for item in override_items(overrides) if len(item) <= SHORT_OVERRIDE))
    return f"{short[:max_length - 11]}-{tag}" if short else tag


def folder_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", text)


def override_items(overrides: str) -> list[str]:
    """The overrides of an override_dirname, split at the commas outside brackets (`paths=[a,b],layer=3`)."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(overrides):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(overrides[start:index])
            start = index + 1
    return [*items, overrides[start:]]


def register_resolvers(**extra: Callable[..., Any]) -> None:
    """Register the resolvers of the configs in conf/: this module's own, and `extra` (resolvers made of a lower
    layer's code, registered by the package that imports it: `probing.tasks` registers the fine-tuned comparison's)."""
    resolvers = {"launch_dir": launch_dir, "layers": layer_list, "job_dir": job_dir_name, **extra}
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


register_resolvers()
