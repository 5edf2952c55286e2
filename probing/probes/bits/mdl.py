"""MDL probing with the online code (Voita & Titov 2020, "Information-Theoretic Probing with Minimum Description
Length", §2.2): the bits needed to transmit the training labels given the representations, torch-free.

See docs/word_tasks.md, 'MDL probing, online code'.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from probing.data.settings import require_bool, require_int
from probing.errors import ConfigError, ProbingError, setting

DEFAULT_FRACTIONS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)


def check_fractions(fractions: Sequence[float] | None) -> tuple[float, ...]:
    """The block ends as shares of the training data: increasing, in (0, 1], the last one 1.0 (the setting
    `mdl_fractions`); None gives the paper's."""
    if fractions is None:
        return DEFAULT_FRACTIONS
    name = setting("mdl_fractions")
    fix = f"Fix: increasing shares in (0, 1] that end with 1.0, e.g. {name}=[0.001,0.01,0.1,0.5,1.0]"
    if isinstance(fractions, (str, bytes)) or not isinstance(fractions, Sequence) or not fractions:
        raise ConfigError(f"{name}={fractions!r} is not a list of numbers. {fix}")
    values = list(fractions)
    if any(isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1 for f in values):
        raise ConfigError(f"{name}={values!r} holds a value that is not a number in (0, 1]. {fix}")
    if any(b <= a for a, b in zip(values, values[1:])) or values[-1] != 1:
        raise ConfigError(f"{name}={values!r} must increase and end with 1.0 (the last block ends "
                          f"with the whole training set). {fix}")
    return tuple(float(f) for f in values)


def block_ends(n: int, fractions: Sequence[float] | None = DEFAULT_FRACTIONS) -> list[int]:
    """The ends t_1 < ... < t_S = n of the blocks of n examples: t_i = max(1, round(f_i * n)), rounding halves up
    (n=1000: 0.0625 -> 63).

    The paper leaves small n open: several shares can then round to the same end (n=100: 0.1 %, 0.2 %, 0.4 % all give
    1); repeated ends are dropped, so that no block is empty and S can be smaller than the number of shares. t_1 is at
    least 1: the first block always holds an example, sent with the uniform code.
    """
    n = operator.index(n)
    if n < 1:
        raise ProbingError("the online code needs at least one training example, got none. Fix: check the "
                           "training split of the task")
    ends: list[int] = []
    for fraction in check_fractions(fractions):
        end = min(n, max(1, math.floor(fraction * n + 0.5)))
        if not ends or end > ends[-1]:
            ends.append(end)
    return ends


def mdl_order(n: int, seed: int) -> np.ndarray:
    """Each example's position in a seeded random order of `n` examples: block i of the online code holds the
    examples at positions [t_{i-1}, t_i)."""
    order = np.empty(n, dtype=np.int64)
    order[np.random.default_rng(seed).permutation(n)] = np.arange(n)
    return order


def uniform_codelength(n: int, num_labels: int, labels_per_example: int = 1) -> float:
    """n m log2 K bits: every label (m per example) sent with the uniform code over the K labels."""
    return n * labels_per_example * math.log2(num_labels)


def online_codelength(first_block: int, num_labels: int, block_bits: Sequence[float],
                      labels_per_example: int = 1) -> float:
    """t_1 m log2 K (the first block, uniform code) + the bits of every later block (each sent with the probe trained
    on the blocks before it)."""
    return uniform_codelength(first_block, num_labels, labels_per_example) + float(sum(block_bits))


def summary(num_labels: int, ends: Sequence[int], block_bits: Sequence[float],
            control_block_bits: Sequence[float] | None = None, labels_per_example: int = 1) -> dict:
    """The `mdl` block of results.json, from the block ends and the bits of blocks 2..S (and of the control task's
    labels, sent the same way, when there is one):

        codelength_bits, uniform_codelength_bits, compression (uniform / online), block_fractions (t_i / n),
        block_ends, block_bits; with a control task control_codelength_bits, control_compression,
        control_block_bits

    The control task's labels come from the same K labels, so both share the uniform codelength. The s-class task
    sends C binary decisions per example (`labels_per_example` = C, K = 2; Zhao et al.'s C independent probes).
    """
    ends = [int(end) for end in ends]
    if not ends or len(block_bits) != len(ends) - 1:
        raise ProbingError(f"the online code needs the bits of each block after the first: {len(ends)} block ends "
                           f"but {len(block_bits)} block bits")
    n = ends[-1]
    uniform = uniform_codelength(n, num_labels, labels_per_example)
    online = online_codelength(ends[0], num_labels, block_bits, labels_per_example)
    result = {
        "codelength_bits": online,
        "uniform_codelength_bits": uniform,
        "compression": uniform / online if online > 0 else math.inf,
        "block_fractions": [end / n for end in ends],
        "block_ends": ends,
        "block_bits": [float(bits) for bits in block_bits],
    }
    if control_block_bits is not None:
        if len(control_block_bits) != len(block_bits):
            raise ProbingError(f"{len(control_block_bits)} control block bits for {len(block_bits)} blocks")
        control = online_codelength(ends[0], num_labels, control_block_bits, labels_per_example)
        result |= {
            "control_codelength_bits": control,
            "control_compression": uniform / control if control > 0 else math.inf,
            "control_block_bits": [float(bits) for bits in control_block_bits],
        }
    return result


class OnlineCode:
    """The online code of one probe run (`probe.mdl`; built by `online_code`): the seed that orders the training
    examples before the blocks are cut (the examples take their positions in a permutation drawn from it, and an
    example's position decides its block, and so the prefix probes that train on it) and the block ends as shares of
    the training set (`mdl_fractions`). It gives the datamodule its order (`order`) and the probe module its
    block ends (`block_ends`), and computes the codelength once the probes are trained (`codelength`). The order is
    the same for the real and the control task and for every representation probed with the same seed."""

    def __init__(self, fractions: Sequence[float] | None = DEFAULT_FRACTIONS, seed: int = 0):
        self.fractions = check_fractions(fractions)
        self.seed = require_int("seed", seed)

    def order(self, n: int) -> np.ndarray:
        """Each of the n training examples' position in the seeded order (`mdl_order`)."""
        return mdl_order(n, self.seed)

    def block_ends(self, n: int) -> list[int]:
        """The block ends of n training examples (`block_ends`)."""
        return block_ends(n, self.fractions)

    def codelength(self, module, datamodule) -> dict:
        """The `mdl` block of results.json: the trained module's online code of the training labels, every training
        example sent once (`ClassifierProbe.codelength`)."""
        return module.codelength(datamodule.train_dataloader_in_order())


def online_code(mdl: bool, mdl_fractions: Sequence[float] | None = DEFAULT_FRACTIONS, seed: int = 0,
                level: str = "context", reuse: object = None) -> OnlineCode | None:
    """The run's online code (`probe.mdl`), or None when it is off (its settings are checked either way); the
    settings are named as the probe's (`probe.mdl_fractions`, `probe.level`, `probe.reuse` in probe.py). Refused where
    there is nothing to send: at the type level (one example per word, not the labels of the training contexts), and
    with saved probes (reuse trains nothing, and the code is what training the prefix probes costs)."""
    require_bool(setting("mdl"), mdl)
    code = OnlineCode(mdl_fractions, seed)
    if not mdl:
        return None
    on, level_name, reuse_name = f"{setting('mdl')}=true", setting("level"), setting("reuse")
    if reuse:
        raise ConfigError(f"{on} trains the prefix probes of the online code; {reuse_name} scores saved "
                          f"probes without training. Fix: {setting('mdl')}=false or {reuse_name}=null")
    if level != "context":
        raise ConfigError(f"{on} sends the labels of the training contexts; {level_name}=type has one "
                          f"example per word instead. Fix: {level_name}=context or {setting('mdl')}=false")
    return code


SCORES = ("codelength_bits", "compression", "control_codelength_bits", "control_compression")  # into W&B's summary


def scores(results: dict) -> dict[str, float]:
    """The `mdl` block's headline numbers as `mdl/<key>` (none without an `mdl` block)."""
    block = results.get("mdl") or {}
    return {f"mdl/{key}": block[key] for key in SCORES if key in block}


def describe(results: dict) -> str:
    """', online codelength 3.8 kbits (compression 7.12; control 15.6 kbits, 1.75)' for a log line; '' without MDL."""
    block = results.get("mdl")
    if not block:
        return ""
    control = (f"; control {block['control_codelength_bits'] / 1000:.1f} kbits, {block['control_compression']:.2f}"
               if "control_codelength_bits" in block else "")
    return (f", online codelength {block['codelength_bits'] / 1000:.1f} kbits (compression "
            f"{block['compression']:.2f}{control})")
