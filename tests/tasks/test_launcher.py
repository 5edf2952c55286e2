"""Sweeps through Hydra's launcher plugins: a submitit_local sweep runs its jobs as parallel processes that share
their feature stores and still ends with the report; a launcher that is not installed is one `error:` line.
(check_launcher itself is tested in tests/test_cli.py.)"""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from probing.errors import ConfigError
from probing.features.provision import MULTIRUN_LOCK_WAIT_S, lock_wait_seconds
from probing.tasks.settings import store_settings
from tests.helpers import REPO, run_script
from tests.helpers.runs import compose_job, tiny_model


@pytest.mark.slow
def test_a_submitit_local_sweep_shares_its_stores_and_writes_the_report(tmp_path, tiny_bert_path):
    sweep = tmp_path / "sweep"
    result = run_script("probe.py", "-m", "hydra/launcher=submitit_local", "layer=0,2", "trainer.max_epochs=1",
                        "probe.control_task.enabled=false", *tiny_model(tiny_bert_path), f"hydra.sweep.dir={sweep}",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    layers = sorted(json.loads(p.read_text())["layer"] for p in sweep.glob("*/results.json"))
    assert layers == [0, 2]
    assert len(list(sweep.glob(".submitit/*/*_result.pkl"))) == 2  # each job ran as its own submitit process
    assert len(list((tmp_path / "stores").rglob("train.*.h5"))) == 1  # both jobs used one store
    rows = [line for line in (sweep / "report.md").read_text().splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:3]] == ["| 0", "| 2"]


def test_a_launcher_without_its_plugin_is_one_error_line(tmp_path):
    result = run_script("probe.py", "-m", "hydra/launcher=joblib", "layer=0", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: hydra/launcher=joblib needs a Hydra launcher plugin that is not installed. Fix: pip install "
        "hydra-joblib-launcher, or leave out hydra/launcher (jobs then run one after another)"]
    assert not (tmp_path / "stores").exists()


def test_the_slurm_gpu_launcher_gives_each_job_one_gpu():
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("probe", overrides=["hydra/launcher=slurm_gpu"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.nodes) == (1, 1, 1)


def test_lock_wait_is_a_day_in_a_multirun_and_none_in_a_single_run(tmp_path):
    assert lock_wait_seconds(None, False) == 0.0 and lock_wait_seconds(30, False) == 30.0
    assert lock_wait_seconds(None, True) == MULTIRUN_LOCK_WAIT_S == 86400.0 and lock_wait_seconds(0, True) == 0.0
    for bad in (-1, "soon", True):
        with pytest.raises(ConfigError, match="^lock_wait_s="):
            lock_wait_seconds(bad, False)
    features = compose_job("probe", tmp_path, "features.lock_wait_s=-1").features
    with pytest.raises(ConfigError, match=r"^features.lock_wait_s=-1 is not a number of seconds\. Fix: a number >= 0"):
        store_settings(features)
