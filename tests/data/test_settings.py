"""The setting checks every layer shares: integers and booleans only as such, one of the choices, one path or a list
of paths."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pytest
import torch

from probing.data.settings import (
    check_optimizer,
    choose,
    optional_int,
    optional_path,
    path_list,
    require_bool,
    require_int,
)
from probing.errors import ConfigError


@pytest.mark.parametrize("value", [True, False])
def test_require_bool_returns_a_boolean(value):
    assert require_bool("data.source.include_verbs", value) is value


@pytest.mark.parametrize("value", ["no", "yes", "true", "false", 1, 0, None])
def test_require_bool_refuses_everything_else_naming_the_key(value):
    with pytest.raises(ConfigError) as caught:
        require_bool("data.source.include_verbs", value)
    message = str(caught.value)
    assert f"data.source.include_verbs must be true or false, got {value!r}" in message
    assert message.endswith("Fix: data.source.include_verbs=true or data.source.include_verbs=false")


def test_path_list_takes_one_string_as_a_one_element_list():
    assert path_list("data.source.paths", "a/b.conllulex") == [Path("a/b.conllulex")]
    assert path_list("data.source.paths", Path("/x")) == [Path("/x")]
    assert path_list("data.source.paths", ["a", "b"]) == [Path("a"), Path("b")]
    assert path_list("data.source.paths", ("a",)) == [Path("a")]


@pytest.mark.parametrize("value", [[], "", 3, {"a": 1}, ["a", 3], ["a", ""]])
def test_path_list_refuses_empty_lists_and_non_paths(value):
    with pytest.raises(ConfigError, match=r"data\.source\.paths must .*Fix: data\.source\.paths=\[FILE\]"):
        path_list("data.source.paths", value)


def test_optional_path():
    assert optional_path("data.corpus", None) is None and optional_path("data.corpus", "") is None
    assert optional_path("data.corpus", "c.txt") == Path("c.txt")
    with pytest.raises(ConfigError, match=r"data\.corpus must be one path, got \['c.txt'\].*Fix: data\.corpus="):
        optional_path("data.corpus", ["c.txt"])


def test_require_int_returns_an_integer_at_least_the_minimum():
    assert require_int("seed", 0) == 0
    assert require_int("probe.batch_size", 3, minimum=1) == 3


@pytest.mark.parametrize(("value", "minimum"), [(True, None), (1.0, None), ("3", None), (None, None), (0, 1)])
def test_require_int_refuses_everything_else_naming_the_key(value, minimum):
    bound = "" if minimum is None else f" >= {minimum}"
    with pytest.raises(ConfigError) as caught:
        require_int("probe.batch_size", value, minimum=minimum)
    assert str(caught.value) == (f"probe.batch_size={value!r} is not an integer{bound}. "
                                 f"Fix: set probe.batch_size to an integer{bound}")


def test_optional_int_takes_null_and_offers_it_in_the_fix():
    assert optional_int("analysis.patience", None, minimum=1) is None
    assert optional_int("analysis.patience", 3, minimum=1) == 3
    with pytest.raises(ConfigError) as caught:
        optional_int("analysis.patience", 0, minimum=1, null="every epoch")
    assert str(caught.value) == ("analysis.patience=0 is not an integer >= 1. "
                                 "Fix: set analysis.patience to an integer >= 1, or null (every epoch)")


def test_choose_returns_the_choice_or_names_the_first_as_the_fix():
    assert choose("analysis.correlation", "pearson", ("spearman", "pearson")) == "pearson"
    with pytest.raises(ConfigError) as caught:
        choose("analysis.correlation", "kendall", ("spearman", "pearson"))
    assert str(caught.value) == ("analysis.correlation='kendall' is not one of spearman, pearson. "
                                 "Fix: analysis.correlation=spearman")


@pytest.mark.parametrize("keywords, message", [
    ({"lr": "abc"}, "opt.lr='abc' is not a number"), ({"lr": -1e-3}, "opt.lr=-0.001 is not a number"),
    ({"lr": 0}, "opt.lr=0 would train nothing"), ({"lr": 1e-3, "weight_decay": "x"}, "opt.weight_decay='x'"),
])
def test_an_optimizers_learning_rate_and_weight_decay_are_checked_before_training(keywords, message):
    check_optimizer(partial(torch.optim.Adam, lr=1e-3, weight_decay=0.01), "opt")
    with pytest.raises(ConfigError, match=rf"^{re.escape(message)}"):
        check_optimizer(partial(torch.optim.Adam, **keywords), "opt")
