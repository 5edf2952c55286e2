"""Every setting that a message of the library names (`Fix: set finetune.module.optimizer.lr=...`) is a real key of
a composed config: a user who copies the fix must not meet "Key not in struct" next."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, ListConfig, OmegaConf

from probing.data.task_records import FINETUNING_KINDS
from tests.helpers import CONFIG_DIR, REPO

# The top-level config nodes a message may name; a dotted word starting with one of them is read as a key.
NODES = ("analysis", "callbacks", "data", "embeddings", "features", "finetune", "hydra", "logger", "model", "paths",
         "probe", "representation", "task", "trainer")
KEY = re.compile(rf"(?<![\w./-])\+{{0,2}}((?:{'|'.join(NODES)})(?:\.\w+)+)")
# Dotted words that are file or module names, not settings.
NOT_KEYS = re.compile(r"\.(py|json|yaml|txt|h5|safetensors|ckpt)$|^hydra\.(utils|errors|core)\b")
# Lightning Trainer arguments that a user adds with `+trainer.<argument>=...`.
TRAINER_ARGUMENTS = ("limit_train_batches", "limit_val_batches", "num_nodes", "strategy", "deterministic")


def message_keys() -> dict[str, str]:
    """Each key named in a string of probing/ (messages, docstrings), with one place that names it."""
    keys = {}
    for path in sorted((REPO / "probing").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for match in KEY.finditer(node.value):
                    key = match.group(1).rstrip(".")
                    if not NOT_KEYS.search(key):
                        keys.setdefault(key, f"{path.relative_to(REPO)}:{node.lineno}")
    return keys


def task_kind(name: str) -> str:
    """The `task.kind` of conf/task/<name>.yaml."""
    return OmegaConf.load(Path(CONFIG_DIR, "task", f"{name}.yaml")).task.kind


def options(group: str) -> list[str]:
    return sorted(path.stem for path in Path(CONFIG_DIR, group).glob("*.yaml"))


@cache
def known_keys() -> frozenset[str]:
    """Every key path of the entry scripts' configs, composed with each option of their groups."""
    variants = [("extract", []), ("probe", []), ("train", []), ("analyze", [])]
    variants += [("probe", [f"data={name}"]) for name in options("data")]
    variants += [("probe", [f"embeddings={name}"]) for name in options("embeddings")]
    variants += [("probe", [f"model={name}"]) for name in options("model")]
    variants += [("probe", [f"callbacks={name}"]) for name in options("callbacks")]
    variants += [("probe", [f"trainer={name}"]) for name in options("trainer")]
    variants += [("probe", [f"logger={name}"]) for name in options("logger")]
    variants += [("probe", [f"task={name}"]) for name in options("task")]
    variants += [("train", [f"task={name}"]) for name in options("task") if task_kind(name) in FINETUNING_KINDS]
    variants += [("analyze", [f"analysis={name}"]) for name in options("analysis")]
    variants += [("analyze", [f"analysis/sentences={name}"]) for name in options("analysis/sentences")]
    keys = set()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for config, overrides in variants:
            keys |= key_paths(compose(config, overrides=overrides, return_hydra_config=True))
    return frozenset(keys)


def key_paths(node, prefix: str = "") -> set[str]:
    paths = {prefix} if prefix else set()
    if isinstance(node, DictConfig):
        for key in node:
            child = node._get_node(key)
            paths |= key_paths(child if OmegaConf.is_config(child) else None, f"{prefix}.{key}".lstrip("."))
    elif isinstance(node, ListConfig):
        paths |= {f"{prefix}.{index}" for index in range(len(node))}
    return paths


def is_known(key: str) -> bool:
    if key in known_keys():
        return True
    head, _, argument = key.partition(".")
    return head == "trainer" and argument in TRAINER_ARGUMENTS


def test_message_keys_are_found():
    keys = message_keys()
    assert {"finetune.module.optimizer.lr", "data.split.seed", "features.max_length"} <= set(keys)


@pytest.mark.parametrize("key,where", sorted(message_keys().items()))
def test_a_key_named_in_a_message_exists(key, where):
    assert is_known(key), f"{where} names `{key}`, which no composed config has"


def test_the_check_refuses_a_key_that_does_not_exist():
    assert not is_known("finetune.optimizer.lr") and is_known("finetune.module.optimizer.lr")
