"""Every command the README and docs/ show passes the entry scripts' command-line check, composes and resolves
completely, with the default logger (W&B offline): a renamed key, a broken interpolation or a top-level typo in a
documented command fails here in seconds, not in a newcomer's terminal. Sweeps are expanded: each axis (command line
or preset) at each of its representative values."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict
from omegaconf.errors import InterpolationKeyError

from probing.cli import app_config_loader, check_command_line
from probing.errors import ConfigError
from probing.tasks import analyze, probe, train
from probing.tasks.settings import check_config
from tests.helpers import CONFIG_DIR
from tests.helpers.commands import (
    ENTRY_SCRIPTS,
    Command,
    commands_of,
    documented_commands,
    sweep_variants,
    with_placeholders_filled,
)

COMMANDS = documented_commands()
DEFAULTS = [Command("defaults", script, (), multirun=False) for script in ENTRY_SCRIPTS]
ANALYSES = [Command("defaults", "analyze.py", (f"analysis={path.stem}",), multirun=False)
            for path in sorted(Path(CONFIG_DIR, "analysis").glob("*.yaml"))]


def resolved(script: str, overrides: tuple[str, ...], run_dir: Path, multirun: bool) -> dict:
    """The config of `python <script> <overrides>` resolved completely, Hydra's own section included, as the job
    sees it (its run folder at run_dir)."""
    with app_config_loader(CONFIG_DIR) as loader:
        cfg = loader.load_configuration(script.removesuffix(".py"), list(overrides),
                                        RunMode.MULTIRUN if multirun else RunMode.RUN)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.override_dirname = ",".join(overrides)
    HydraConfig.instance().set_config(cfg)
    try:
        hydra_section = OmegaConf.to_container(cfg.hydra, resolve=True)
        with open_dict(cfg):
            del cfg.hydra
        check_config(cfg)
        job = OmegaConf.to_container(cfg, resolve=True)
    finally:
        HydraConfig.instance().cfg = None  # no later test in this process sees this command's Hydra config
    return {"hydra": hydra_section, **job}


def preset_axes(resolved_config: dict) -> list[str]:
    """The sweep axes a preset declares (`hydra.sweeper.params`), as command-line sweep overrides."""
    params = resolved_config["hydra"]["sweeper"].get("params") or {}
    return [f"{key}={value}" for key, value in params.items()]

# How each entry script with a logger names its W&B run (from its own settings, when it runs).
RUN_NAMES = {"probe": probe.run_name, "train": train.run_name, "analyze": analyze.run_name}


@pytest.mark.parametrize("command", DEFAULTS + ANALYSES + COMMANDS, ids=str)
def test_documented_command_resolves(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths of a command resolve against the launch folder, as for a user
    monkeypatch.delenv("WANDB_MODE", raising=False)
    overrides = with_placeholders_filled(command, tmp_path)
    check_command_line(["-m"] * command.multirun + list(overrides), CONFIG_DIR, command.script.removesuffix(".py"))
    for variant in sweep_variants(overrides) if command.multirun else [overrides]:
        config = resolved(command.script, variant, tmp_path / "run", command.multirun)
        for preset_variant in sweep_variants(variant + tuple(preset_axes(config)))[1:] if command.multirun else []:
            resolved(command.script, preset_variant, tmp_path / "run", multirun=True)
        if (config.get("logger") or {}).get("wandb"):  # named by the job from its own settings (none it lacks)
            name, group = RUN_NAMES[command.script.removesuffix(".py")](OmegaConf.create(config))
            assert name.startswith(f"{group}-"), (name, group)


def test_the_documents_show_every_entry_script():
    shown = {command.script for command in COMMANDS}
    assert shown == set(ENTRY_SCRIPTS), f"no documented command of {set(ENTRY_SCRIPTS) - shown}"
    assert len(COMMANDS) >= 40 and sum(command.multirun for command in COMMANDS) >= 10


def test_command_parsing_follows_the_shell():
    line = "for p in 32-true bf16-mixed; do python probe.py -m layer=0,6 seed=$p trainer.max_epochs=2; done  # note"
    [command] = commands_of(line, "x:1")
    assert command.script == "probe.py" and command.multirun
    assert command.overrides == ("layer=0,6", "seed=32-true", "trainer.max_epochs=2")
    assert commands_of("python bench/probe.py --epochs 5", "x:2") == []
    [first, second] = commands_of(".venv/bin/python extract.py && python train.py task=ner", "x:3")
    assert (first.script, first.overrides, second.script, second.overrides) == \
        ("extract.py", (), "train.py", ("task=ner",))
    assert sweep_variants(("layer=0,1,2,mix", "seed=3", "model=a,b")) == [
        ("layer=0", "seed=3", "model=a"), ("layer=2", "seed=3", "model=a"), ("layer=mix", "seed=3", "model=a"),
        ("layer=0", "seed=3", "model=b")]


def test_a_broken_interpolation_fails_the_check(tmp_path, monkeypatch):
    """The check can fail: train.py's W&B run once interpolated `layer`, a key only probe.py's config has."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InterpolationKeyError, match="layer"):
        resolved("train.py", ("logger.wandb.name=${model.name}-layer${layer}",), tmp_path / "run", multirun=False)
    with pytest.raises(ConfigError, match="laeyr"):
        check_command_line(["+laeyr=3"], CONFIG_DIR, "probe")
