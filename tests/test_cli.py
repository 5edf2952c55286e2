"""probing/cli/: user errors as one `error:` line (rank 0 only) and exit status 2, the command-line check
(launchers, config names, keys), the sweep check (SweepCheck and its helpers) and quiet non-zero ranks. The entry
scripts run end to end in tests/tasks/test_entry_scripts.py; tests/test_hydra_api.py holds probing/cli/ to Hydra's
public API and to the Hydra versions pyproject.toml allows."""

from __future__ import annotations

import logging
import sys
import warnings

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import OmegaConf

from probing.cli import logs
from probing.cli.command_line import check_command_line
from probing.cli.compose import app_config_loader
from probing.cli.exits import exit_with, probing_cause, user_errors_exit_cleanly
from probing.cli.launchers import check_launcher, own_launcher_configs
from probing.cli.logs import process_rank, quiet_on_other_ranks
from probing.cli.sweep_check import SweepCheck, command_line_axes, sweep_variants, user_error_in
from probing.errors import ConfigError, ProbingError
from tests.helpers import REPO

CONFIG_DIR = str(REPO / "conf")
FAIL_RESOLVER = "test_cli_fails"


@pytest.fixture
def failing_resolver():
    """`${test_cli_fails:}`: a resolver that raises a ConfigError, as the finetuned= resolvers do."""
    def fail():
        raise ConfigError("finetuned: /x holds no model. Fix: name a train.py run folder")

    OmegaConf.register_new_resolver(FAIL_RESOLVER, fail, replace=True)
    yield "${" + FAIL_RESOLVER + ":}"
    OmegaConf.clear_resolver(FAIL_RESOLVER)


@pytest.fixture
def rank(monkeypatch):
    """Set this process's rank as Lightning would (rank_zero_only.rank); None: Lightning has not set it."""
    def set_rank(value):
        monkeypatch.setattr(logs.rank_zero_only, "rank", value, raising=False)
    return set_rank


# --- exit_with, process_rank, quiet ranks ---------------------------------------------------------------------------

@pytest.mark.parametrize("rank_value, printed", [(0, True), (1, False)])
def test_a_user_error_is_printed_by_rank_zero_only_and_every_rank_exits_2(rank, capsys, rank_value, printed):
    rank(rank_value)
    with pytest.raises(SystemExit) as exit_:
        exit_with(ConfigError("trainer.devices=0 is wrong. Fix: trainer.devices=1"))
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("error: trainer.devices=0 is wrong. Fix: trainer.devices=1\n" if printed else "")


@pytest.mark.parametrize("environment, expected", [
    ({"RANK": "3", "LOCAL_RANK": "1"}, 3),   # RANK first
    ({"LOCAL_RANK": "1"}, 1),
    ({}, 0),
    ({"RANK": "not-a-number"}, 0),
])
def test_without_lightnings_rank_the_launchers_variables_give_it(rank, monkeypatch, environment, expected):
    rank(None)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert process_rank() == expected


def test_lightnings_rank_comes_before_the_environment(rank, monkeypatch):
    rank(2)
    monkeypatch.setenv("RANK", "5")
    assert process_rank() == 2


@pytest.mark.parametrize("rank_value, level", [(0, logging.NOTSET), (1, logging.WARNING)])
def test_only_rank_zero_keeps_info_messages(rank, rank_value, level):
    logger = logging.getLogger("probing")
    before = logger.level
    logger.setLevel(logging.NOTSET)
    try:
        rank(rank_value)
        quiet_on_other_ranks()
        assert logger.level == level
    finally:
        logger.setLevel(before)


# --- user_errors_exit_cleanly and probing_cause ---------------------------------------------------------------------

def test_a_probing_error_becomes_one_line_and_status_2_and_a_bug_keeps_its_traceback(rank, capsys):
    rank(0)

    @user_errors_exit_cleanly
    def main(error):
        raise error

    with pytest.raises(SystemExit) as exit_:
        main(ConfigError("layer=9 is out of range. Fix: layer=0..2"))
    assert exit_.value.code == 2 and capsys.readouterr().err == "error: layer=9 is out of range. Fix: layer=0..2\n"
    with pytest.raises(ZeroDivisionError):
        main(ZeroDivisionError("a bug"))


def interrupted_main(lightning_exit: bool):
    """A job stopped by Ctrl-C: the KeyboardInterrupt itself, or Lightning's exit(1) after its graceful shutdown."""
    @user_errors_exit_cleanly
    def main():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            if lightning_exit:
                sys.exit(1)
            raise
    return main


@pytest.mark.parametrize("lightning_exit", [False, True])
def test_ctrl_c_is_one_line_on_how_to_go_on_and_status_130(rank, capsys, lightning_exit, monkeypatch):
    rank(0)
    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: False))
    with pytest.raises(SystemExit) as exit_:
        interrupted_main(lightning_exit)()
    assert exit_.value.code == 130 and capsys.readouterr().err == "interrupted. Run the command again to go on\n"


@pytest.mark.parametrize("mode, folder", [(RunMode.RUN, "hydra.run.dir={out}"),
                                          (RunMode.MULTIRUN, "hydra.sweep.dir={sweep}")])
def test_after_ctrl_c_the_hint_names_the_folder_to_relaunch_into(rank, capsys, monkeypatch, tmp_path, mode, folder):
    rank(0)
    sweep, out = tmp_path / "multiruns" / "time", tmp_path / "multiruns" / "time" / "layer=1"
    hydra = OmegaConf.create({"mode": mode.name, "runtime": {"output_dir": str(out)}})
    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: True))
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: OmegaConf.merge(hydra, {"mode": mode})))
    with pytest.raises(SystemExit):
        interrupted_main(lightning_exit=True)()
    assert capsys.readouterr().err.startswith(
        f"interrupted. To go on where it stopped, run the same command with {folder.format(out=out, sweep=sweep)}: "
        "feature stores resume row by row")


def test_another_exit_passes_through(rank, capsys):
    @user_errors_exit_cleanly
    def main():
        sys.exit(1)

    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 1 and capsys.readouterr().err == ""


def test_a_probing_error_inside_a_resolver_is_unwrapped(rank, capsys, failing_resolver):
    rank(0)
    config = OmegaConf.create({"finetuned": failing_resolver, "broken": "${no_such_key}"})

    @user_errors_exit_cleanly
    def main(key):
        return config[key]

    with pytest.raises(SystemExit) as exit_:
        main("finetuned")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: finetuned: /x holds no model. Fix: name a train.py run folder\n"
    with pytest.raises(Exception, match="no_such_key"):  # an OmegaConf failure of its own is raised as it is
        main("broken")


def test_probing_cause_follows_causes_and_contexts_and_stops_on_a_cycle():
    root = ConfigError("the root")
    middle = RuntimeError("middle")
    middle.__context__ = root
    top = ValueError("top")
    top.__cause__ = middle
    assert probing_cause(top) is root
    assert probing_cause(root) is root
    first, second = ValueError("a"), ValueError("b")
    first.__cause__, second.__cause__ = second, first
    assert probing_cause(first) is None
    assert probing_cause(ValueError("alone")) is None


# --- check_launcher --------------------------------------------------------------------------------------------------

def test_launcher_names_are_checked_against_the_installed_plugins(monkeypatch):
    check_launcher(["layer=0", "hydra/launcher=submitit_local", "hydra/launcher=slurm_gpu", "hydra/launcher=basic"],
                   CONFIG_DIR)
    with pytest.raises(ConfigError, match="hydra/launcher=slurmm is no launcher known here"):
        check_launcher(["hydra/launcher=slurmm"], CONFIG_DIR)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install 'probing\[cluster\]'"):
        check_launcher(["hydra/launcher=submitit_slurm"], CONFIG_DIR)
    with pytest.raises(ConfigError, match="pip install hydra-joblib-launcher"):
        check_launcher(["+hydra/launcher=joblib"], CONFIG_DIR)
    check_launcher(["hydra/launcher=slurm_gpu"], CONFIG_DIR)  # the project's own config needs no plugin check


# --- check_command_line ----------------------------------------------------------------------------------------------

def refusal(*arguments: str, config_name: str = "probe") -> str:
    """The one-line message check_command_line refuses `arguments` with."""
    with pytest.raises(ConfigError) as refused:
        check_command_line(list(arguments), CONFIG_DIR, config_name)
    assert "\n" not in str(refused.value)
    return str(refused.value)


@pytest.mark.parametrize("arguments, config_name", [
    (["layer=3", "probe=linear", "trainer.max_epochs=2", "+trainer.gradient_clip_val=1.0"], "probe"),
    (["-m", "layer=0,1", "seed=range(2)", "probe=mlp1,mlp2", "probe.module.optimizer.lr=interval(0,1)"], "probe"),
    (["analysis=isotropy", "analysis/sentences=sts", "analysis.batch_size=8"], "analyze"),
    (["task=mrpc", "trainer=ddp", "trainer.devices=2", "hydra.run.dir=x", "hydra.output_subdir=null"], "train"),
    (["--help", "trainer.max_epoch=3"], "probe"),  # Hydra's help, and other configs (-cn, -cd), are Hydra's business
    (["-r", "experiment=layer_sweep", "seed=0,1"], "probe"),  # a preset's multirun mode holds under -r, as in Hydra
])
def test_a_command_line_that_composes_passes(arguments, config_name):
    check_command_line(arguments, CONFIG_DIR, config_name)


def test_a_config_name_that_its_group_lacks_is_refused_with_the_groups_options():
    expected = "probe=mlp3: probe has no config 'mlp3'. Fix: one of linear, mass_mean, mlp1, mlp2, sclass_mlp"
    assert refusal("probe=mlp3") == refusal("-m", "probe=mlp1,mlp3") == refusal("probe=[mlp1,mlp3]") == expected
    assert refusal("analysis/sentences=nope", config_name="analyze").startswith(
        "analysis/sentences=nope: analysis/sentences has no config 'nope'. Fix: one of mrpc, ner, pos, sst2, streusle, "
        "sts")


def test_a_misspelt_key_is_refused_naming_the_closest_keys_at_its_place():
    assert refusal("trainer.max_epoch=3") == (
        "trainer.max_epoch=3: trainer has no setting 'max_epoch'. Fix: trainer.max_epochs (the closest name), or "
        "+trainer.max_epoch=... to pass lightning.Trainer an argument that trainer does not list")
    assert refusal("task.batchsize=3", config_name="train").endswith(
        "Fix: task.batch_size or task.table4_batch_size (the closest names)")
    assert refusal("-m", "layer=0,1", "probe.mix.lrr=0.1,1") == (  # a multirun's sweeps at their first value
        "probe.mix.lrr=0.1: probe.mix has no setting 'lrr'. Fix: probe.mix.lr (the closest name)")


def test_a_key_at_the_wrong_place_is_refused_naming_where_the_config_has_it():
    assert refusal("finetune.optimizer.lr=abc", config_name="train") == (
        "finetune.optimizer.lr=abc: finetune has no setting 'optimizer'. Fix: finetune.module.optimizer.lr (where the "
        "config has optimizer.lr)")
    assert refusal("probe.lr=3").endswith("Fix: probe.module.optimizer.lr or probe.mix.lr (where the config has lr)")


def test_a_key_with_no_close_match_is_refused_listing_the_keys_at_its_place():
    message = refusal("nokey=3")
    assert message.startswith("nokey=3: the config has no setting 'nokey'. Fix: one of task_name, erase, layer, ")
    assert "hydra" not in message and "+nokey" not in message  # the top level takes no setting it does not declare


@pytest.mark.parametrize("arguments, expected", [
    (["layer=[1,2"], "the command line does not parse: no viable alternative at input '[1,2'; See https://hydra.cc"),
    (["probe=linear,mlp1"], "the command line does not compose: Ambiguous value for argument 'probe=linear,mlp1'"),
    (["+trainer.max_epochs=3"], "the command line does not compose: Could not append to config. An item is already"),
    (["task=tree_distance", "data=streusle"], "data=streusle: the configuration that the rest of the command line "
                                              "composes chooses no `data`"),
    (["~trainer.nokey"], "the command line does not compose: Could not delete from config. 'trainer.nokey' does not"),
])
def test_any_other_override_that_hydra_refuses_is_its_message_on_one_line(arguments, expected):
    assert refusal(*arguments).startswith(expected)


def test_a_config_group_option_on_the_search_path_is_an_option(tmp_path):
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "mlp3.yaml").write_text((REPO / "conf" / "probe" / "mlp2.yaml").read_text())
    searchpath = f"hydra.searchpath=[file://{tmp_path}]"
    check_command_line([searchpath, "probe=mlp3"], CONFIG_DIR, "probe")
    assert refusal(searchpath, "probe=mlp4") == (
        "probe=mlp4: probe has no config 'mlp4'. Fix: one of linear, mass_mean, mlp1, mlp2, mlp3, sclass_mlp")


def test_the_configs_of_an_installed_package_are_checked_as_hydra_reads_them():
    """The installed commands read `pkg://probing.conf`; the checkout's conf/ is a package too."""
    assert own_launcher_configs("pkg://conf") == ["slurm_gpu"]
    with pytest.raises(ConfigError, match="probe=mlp3: probe has no config 'mlp3'"):
        check_command_line(["probe=mlp3"], "pkg://conf", "probe")


# --- what Hydra lets through: a top-level setting that the command line adds ---------------------------------------

@pytest.mark.parametrize("arguments, config_name, expected", [
    (["+laeyr=3"], "probe", "+laeyr=3: the config has no setting 'laeyr'. Fix: layer (the closest name)"),
    (["++laeyr=3"], "probe", "++laeyr=3: the config has no setting 'laeyr'. Fix: layer (the closest name)"),
    (["-m", "layer=0,1", "+laeyr=1,2"], "probe",
     "+laeyr=1: the config has no setting 'laeyr'. Fix: layer (the closest name)"),
    (["+taks=ner"], "train", "+taks=ner: the config has no setting 'taks'. Fix: task (the closest name)"),
    (["compare_to=x", "+layers=3"], "analyze",
     "+layers=3: the config has no setting 'layers'. Fix: layer (the closest name)"),
    (["+split=[train]"], "extract",
     "+split=[train]: the config has no setting 'split'. Fix: splits (the closest name)"),
])
def test_a_top_level_setting_that_the_command_line_adds_is_refused_naming_the_closest_keys(arguments, config_name,
                                                                                            expected):
    assert refusal(*arguments, config_name=config_name) == expected


def test_a_top_level_section_that_the_command_line_adds_is_refused_listing_the_top_level_keys():
    assert refusal("+newsection.size=3").startswith(
        "+newsection.size=3: the config has no setting 'newsection'. Fix: one of task_name, erase, layer, ")


@pytest.mark.parametrize("arguments", [
    ["++layer=3"],                       # a setting the config has
    ["+trainer.gradient_clip_val=1.0"],  # an argument of the object built from a section
    ["+finetune=default"],               # a config group added to the defaults
    ["+hydra.job.env_set.X=1"],          # Hydra's own
])
def test_adding_what_the_config_has_a_sections_argument_a_group_or_a_hydra_setting_passes(arguments):
    check_command_line(arguments, CONFIG_DIR, "probe")


# --- the sweep check -------------------------------------------------------------------------------------------------

def sweep_config(task: list[str], choices: dict | None = None, **values):
    return OmegaConf.create({**values, "hydra": {"runtime": {"choices": choices or {}},
                                                  "overrides": {"task": task}}})


def test_command_line_axes_are_the_swept_values_not_groups_hydra_settings_or_intervals():
    config = sweep_config(["layer=0,1", "model=bert,gpt2", "seed=range(3)", "lr=interval(0,1)", "hydra.job.x=1,2",
                           "probe.hidden_dim=8"], choices={"model": "bert"})
    assert command_line_axes(config) == {"layer": [0, 1], "seed": [0, 1, 2]}


def test_sweep_variants_set_each_value_of_each_axis_with_the_others_at_their_first():
    config = sweep_config(["layer=0,1", "seed=7,8"], layer=5, seed=9)
    variants = list(sweep_variants(config))
    assert [(variant.layer, variant.seed) for _, variant in variants] == [(0, 7), (1, 7), (0, 7), (0, 8)]
    assert [setting for setting, _ in variants] == ["layer=0", "layer=1", "seed=7", "seed=8"]
    assert (config.layer, config.seed) == (5, 9)  # copies: the config itself is untouched


def test_without_a_command_line_sweep_the_config_itself_is_checked():
    config = sweep_config(["layer=1"], layer=1)
    assert [(setting, variant is config) for setting, variant in sweep_variants(config)] == [(None, True)]


def test_user_error_in_finds_a_resolver_error_at_any_depth_and_in_the_sweepers_params(failing_resolver):
    assert isinstance(user_error_in(OmegaConf.create({"a": 1, "b": {"c": [2, {"d": failing_resolver}]}})), ConfigError)
    in_sweeper = OmegaConf.create({"hydra": {"sweeper": {"params": {"finetuned": failing_resolver}}}})
    assert isinstance(user_error_in(in_sweeper), ProbingError)


def test_user_error_in_leaves_hydras_own_settings_and_other_failures_alone(failing_resolver):
    assert user_error_in(OmegaConf.create({"hydra": {"job": {"name": failing_resolver}, "sweeper": {"params": None}},
                                           "a": 1})) is None
    assert user_error_in(OmegaConf.create({"missing": "???", "dangling": "${nowhere}", "ok": [1, 2]})) is None


def test_the_sweep_check_exits_2_on_a_bad_value_of_a_command_line_axis(rank, capsys, failing_resolver):
    rank(0)
    config = sweep_config(["finetuned=a,b"], finetuned="a", model={"name_or_path": failing_resolver})
    with pytest.raises(SystemExit) as exit_:
        SweepCheck().on_multirun_start(config=config)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("error: the job with finetuned=a: finetuned: /x holds no model")


def test_a_sweep_with_a_value_that_is_no_layer_is_refused_before_its_first_job_naming_that_job(rank, capsys):
    rank(0)
    config = multirun_config("layer=0,abc,2")
    with pytest.raises(SystemExit) as exit_:
        SweepCheck().on_multirun_start(config=config)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: the job with layer=abc: layer='abc' is not a layer. Fix: an integer (0 = embeddings, -1 = the top "
        "layer), mix, or a baseline (prand, pstatic, bertw, pbert)"]


def multirun_config(*overrides: str):
    """The config a multirun of `probe.py <overrides>` hands its callbacks before the first job (sweeps unapplied)."""
    with app_config_loader(CONFIG_DIR) as loader:
        return loader.load_configuration("probe", list(overrides), run_mode=RunMode.MULTIRUN)


@pytest.mark.parametrize("overrides", [["layer=0,1", "seed=range(2)"], ["experiment=layer_sweep", "seed=0,1"]])
def test_the_sweep_check_of_a_valid_sweep_raises_no_warning(overrides):
    config = multirun_config(*overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Hydra would turn a callback's exception into a UserWarning
        for callback in config.hydra.callbacks.values():  # as Hydra builds and calls them
            instantiate(callback).on_multirun_start(config=config, config_name="probe")
