"""What every job shares (probing.tasks.settings, results_file, loggers, trainer, sweeper): the check of the composed
config, results.json written atomically, a finished job found again (and results of another configuration refused, a
damaged file run again), the job's loggers closed in `finally`, and the feature-store settings a job hands to
probing.features.provision."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import shutil
import socket
import sys
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from omegaconf import OmegaConf

from probing.data.files import write_json_atomically
from probing.data.text import note_data_files
from probing.errors import ConfigError
from probing.features.hf_models import load_encoder, local_models_loaded
from probing.features.provision import MULTIRUN_LOCK_WAIT_S
from probing.results import migrated
from probing.tasks import loggers as job_loggers
from probing.tasks import results_file, settings
from probing.tasks.loggers import build_loggers, closing_loggers
from probing.tasks.results_file import finished_results, job_state, write_results
from probing.tasks.settings import check_config, store_settings
from probing.tasks.sweeper import optimized_value
from probing.tasks.trainer import built_callback, note_precision
from tests.helpers.stores import assert_one_line_error


def test_check_config_refuses_a_seed_that_is_no_integer():
    check_config(OmegaConf.create({"seed": 3}))
    check_config(OmegaConf.create({"task_name": "extract"}))  # a job without a seed
    with pytest.raises(ConfigError, match="seed='abc' is not an integer"):
        check_config(OmegaConf.create({"seed": "abc"}))
    check_config(OmegaConf.create({"seed": 2**32 - 1}))  # the largest seed numpy takes
    for seed in (-1, 2**32):  # what numpy refuses, in a traceback from Lightning's seed_everything
        with pytest.raises(ConfigError, match=rf"^seed={seed} is outside 0\.\.4294967295, the seeds numpy takes"):
            check_config(OmegaConf.create({"seed": seed}))


@pytest.mark.parametrize("budget", [0, -8, 2.5, True])
def test_check_config_refuses_a_token_budget_below_one_input(budget):
    """0 or a negative budget put every input in a batch of its own, silently."""
    check_config(OmegaConf.create({"seed": 1, "features": {"max_tokens_per_batch": 8192}}))
    with pytest.raises(ConfigError) as error:
        check_config(OmegaConf.create({"seed": 1, "features": {"max_tokens_per_batch": budget}}))
    assert str(error.value).startswith(f"features.max_tokens_per_batch={budget!r} is not an integer >= 1. Fix:")


def test_finished_results_are_found_for_the_same_configuration_only(tmp_path):
    path = tmp_path / "results.json"
    assert finished_results(path, {"layer": 3}) is None  # nothing there yet
    write_json_atomically(path, {"dev": 0.5, "config": {"layer": 3}})
    assert finished_results(path, {"layer": 3}) == migrated({"dev": 0.5, "config": {"layer": 3}})
    with pytest.raises(ConfigError, match="holds the results of another configuration") as raised:
        finished_results(path, {"layer": 4})
    assert "Fix: run into a new folder" in str(raised.value)
    assert json.loads(path.read_text())["config"] == {"layer": 3}  # left as it was


def test_the_results_of_a_moved_run_folder_are_found_for_its_relaunch_there(tmp_path):
    """A run (or sweep) folder moved with mv and relaunched into its new place: its results.json records the old
    folder in its config, and is still the results of this configuration; another setting is still refused."""
    def config(run_dir, layer=3):
        return {"layer": layer, "paths": {"output_dir": str(run_dir), "root_dir": str(tmp_path)},
                "trainer": {"default_root_dir": str(run_dir)}, "logger": {"csv": {"save_dir": str(run_dir)}}}

    old, new = tmp_path / "sweep" / "layer=3", tmp_path / "moved" / "layer=3"
    new.mkdir(parents=True)
    write_json_atomically(new / "results.json", {"dev": 0.5, "config": config(old)})
    assert finished_results(new / "results.json", config(new)) == migrated({"dev": 0.5, "config": config(old)})
    with pytest.raises(ConfigError, match="holds the results of another configuration"):
        finished_results(new / "results.json", config(new, layer=4))


@pytest.mark.parametrize("content", ["[]", '"results"', "null"])
def test_a_results_file_that_holds_no_results_is_refused_not_overwritten(tmp_path, content):
    path = tmp_path / "results.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as error:
        finished_results(path, {"layer": 3})
    assert_one_line_error(error.value, f"{path} holds ", "not the results of a run", "Fix: run into a new folder")
    assert path.read_text() == content


@pytest.mark.parametrize("content", [b'{"dev": 0.5, "con', b"\xff\xfe\x00"])
def test_a_damaged_results_file_is_run_again(tmp_path, caplog, content):
    path = tmp_path / "results.json"
    path.write_bytes(content)
    assert finished_results(path, {"layer": 3}) is None
    assert "is damaged" in caplog.text


class RecordingLogger(Logger):
    """A Lightning logger that records how it was closed (and can fail to close)."""

    def __init__(self, fails: bool = False):
        super().__init__()
        self.statuses: list[str] = []
        self.fails = fails

    name = "recording"
    version = 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        pass

    def finalize(self, status: str) -> None:
        self.statuses.append(status)
        if self.fails:
            raise OSError("disk full")


def recording_loggers(monkeypatch, *loggers: RecordingLogger) -> None:
    monkeypatch.setattr(job_loggers, "build_loggers", lambda logger: list(loggers))


def test_every_logger_is_closed_when_the_job_succeeds_or_fails(monkeypatch):
    first, second = RecordingLogger(), RecordingLogger()
    recording_loggers(monkeypatch, first, second)
    with closing_loggers(OmegaConf.create({})) as loggers:
        assert loggers == [first, second]
    with pytest.raises(RuntimeError, match="the job failed"), closing_loggers(OmegaConf.create({})):
        raise RuntimeError("the job failed")
    assert first.statuses == second.statuses == ["success", "failed"]


def test_a_logger_that_fails_to_close_does_not_keep_the_others_or_wandb_open(monkeypatch):
    finished = []
    wandb = SimpleNamespace(run=object(), finish=lambda exit_code: finished.append(exit_code))
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    broken, other = RecordingLogger(fails=True), RecordingLogger()
    recording_loggers(monkeypatch, broken, other)
    with pytest.raises(RuntimeError, match="the job failed"), closing_loggers(None):  # the job's error is the one seen
        raise RuntimeError("the job failed")
    with pytest.raises(OSError, match="disk full"), closing_loggers(None):  # a successful job reports it
        pass
    assert other.statuses == ["failed", "success"] and finished == [1, 0]


def test_the_loggers_of_the_logger_config_are_built_once(tmp_path):
    logger = OmegaConf.create({"csv": {"_target_": "lightning.pytorch.loggers.CSVLogger", "save_dir": str(tmp_path)}})
    with closing_loggers(logger) as loggers:
        assert len(loggers) == 1 and isinstance(loggers[0], CSVLogger)
        loggers[0].log_metrics({"x": 1.0}, step=0)
    assert (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()[1] == "0,1.0"
    with closing_loggers(None) as none:
        assert none == []


def test_store_settings_are_the_features_settings_with_the_lock_wait_of_this_run(monkeypatch):
    features = OmegaConf.create({"store_dir": "/s", "dtype": "float16", "max_tokens_per_batch": 64,
                                 "lock_wait_s": None})
    assert store_settings(features) == {"store_dir": "/s", "dtype": "float16", "max_tokens_per_batch": 64,
                                        "lock_wait_s": 0.0}
    monkeypatch.setattr(settings, "in_multirun", lambda: True)
    assert store_settings(features)["lock_wait_s"] == MULTIRUN_LOCK_WAIT_S
    features.lock_wait_s = 5
    assert store_settings(features)["lock_wait_s"] == 5.0


def test_optimized_metric_is_read_from_the_results():
    results = {"dev": {"micro_f1": 0.5, "selectivity": 0.2, "flag": True}}
    assert optimized_value(results, "dev/selectivity") == 0.2
    for missing in ("dev/nope", "test/micro_f1", "dev/flag", "micro_f1"):
        with pytest.raises(ConfigError, match=f"optimized_metric={missing} is not a score"):
            optimized_value(results, missing)


# --- W&B with a key but no server ------------------------------------------------------------------------------------

FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"  # the shape of a W&B key: it must appear in no output


def refusing_address() -> str:
    """host:port of a local port nobody listens on (a connection to it is refused at once)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{free.getsockname()[1]}"


@pytest.fixture
def wandb_environment(monkeypatch):
    """A key in the environment and WANDB_MODE unset (as a user with a key has it); the server check's answers of
    other tests forgotten."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    job_loggers.wandb_server_problem.cache_clear()
    yield monkeypatch
    job_loggers.wandb_server_problem.cache_clear()


def wandb_loggers(tmp_path) -> list[Logger]:
    """The loggers of conf/logger/wandb.yaml's settings (offline null: decided by `probing.config.wandb_offline`)."""
    return build_loggers(OmegaConf.create({"wandb": {"_target_": "lightning.pytorch.loggers.WandbLogger",
                                                     "project": "probing", "save_dir": str(tmp_path),
                                                     "offline": None}}))


def test_a_key_without_a_reachable_server_logs_offline_with_a_warning(tmp_path, wandb_environment, caplog):
    wandb_environment.setenv("WANDB_BASE_URL", f"http://{refusing_address()}")
    (logger,) = wandb_loggers(tmp_path)
    assert isinstance(logger, WandbLogger) and logger._offline
    assert "WANDB_API_KEY is set, but the W&B server cannot be reached (no connection at 127.0.0.1:" in caplog.text
    assert "this run logs to W&B offline" in caplog.text and FAKE_KEY not in caplog.text


def test_online_mode_asked_without_a_reachable_server_is_one_error(tmp_path, wandb_environment):
    wandb_environment.setenv("WANDB_BASE_URL", f"http://{refusing_address()}")
    wandb_environment.setenv("WANDB_MODE", "online")
    with pytest.raises(ConfigError) as refused:
        wandb_loggers(tmp_path)
    assert_one_line_error(refused.value, "WANDB_MODE=online, but the W&B server cannot be reached")
    assert "Fix: WANDB_MODE=offline" in str(refused.value) and FAKE_KEY not in str(refused.value)


def test_a_reachable_server_keeps_a_key_online_also_through_a_proxy(tmp_path, wandb_environment):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        wandb_environment.setenv("WANDB_BASE_URL", f"http://{address}")
        assert not wandb_loggers(tmp_path)[0]._offline
        job_loggers.wandb_server_problem.cache_clear()
        wandb_environment.setenv("WANDB_BASE_URL", "https://no-such-host.invalid")  # reached through the proxy
        wandb_environment.setenv("HTTPS_PROXY", f"http://{address}")
        assert not wandb_loggers(tmp_path)[0]._offline


def test_check_config_refuses_a_task_of_a_kind_no_job_knows():
    check_config(OmegaConf.create({"seed": 1, "task": {"kind": "pair"}}))
    check_config(OmegaConf.create({"seed": 1, "task": {"kind": "tree"}}))
    with pytest.raises(ConfigError, match=r"^task.kind='span' is not one of sclass, token, word, pair, sentence, tree"):
        check_config(OmegaConf.create({"seed": 1, "task": {"kind": "span"}}))


@pytest.mark.parametrize("setting, message", [
    ({"patience": "abc"}, "callbacks.stop.patience='abc' is not an integer >= 0"),
    ({"min_delta": -1}, "callbacks.stop.min_delta=-1 is not a number in [0, inf)"),
])
def test_an_early_stops_patience_and_min_delta_are_checked_when_it_is_built(setting, message):
    """Lightning compares them only once an epoch fails to improve: a bad value would fail after training."""
    node = {"_target_": "lightning.pytorch.callbacks.EarlyStopping", "monitor": "dev/loss", "mode": "min"}
    assert built_callback("stop", OmegaConf.create({**node, "patience": 5, "min_delta": 1e-4})).patience == 5
    with pytest.raises(ConfigError, match=re.escape(message)):
        built_callback("stop", OmegaConf.create({**node, **setting}))


@pytest.fixture
def unstamped(monkeypatch):
    """write_results without the schema's stamp and check: these tests write a few keys of results to see what is
    recorded beside them (tests/results checks the stamping)."""
    monkeypatch.setattr(results_file, "stamped", lambda results, kind: results)


def test_results_record_the_data_files_read_and_are_not_returned_once_one_has_changed(tmp_path, unstamped):
    """A task's file edited in place: the finished job's results are of other data, and are refused, not returned."""
    cfg = OmegaConf.create({"paths": {"output_dir": str(tmp_path / "run")}, "layer": 3})
    data = tmp_path / "task.jsonl"
    data.write_text('{"tokens": ["a"], "labels": ["X"]}\n')
    out, config, previous = job_state(cfg)
    assert previous is None
    note_data_files([data, data])  # read twice (two splits of one file): recorded once
    (tmp_path / "run").mkdir()
    write_results(out, {"dev": 0.5, "config": config}, "sclass_probe")
    recorded = json.loads(out.read_text())["data_files"]
    assert recorded == [[str(data.resolve()), hashlib.sha256(data.read_bytes()).hexdigest()]]
    assert job_state(cfg)[2]["dev"] == 0.5  # unchanged: the finished results
    data.write_text('{"tokens": ["a"], "labels": ["Y"]}\n')
    with pytest.raises(ConfigError, match=r"computed from .*task.jsonl as it was then, and that file has changed"):
        job_state(cfg)
    data.unlink()  # gone: moved with its run folder, say; not checked
    assert job_state(cfg)[2]["dev"] == 0.5


def test_results_record_the_local_models_loaded_and_are_not_returned_once_one_has_changed(
        tmp_path, tiny_bert_path, unstamped):
    """A model folder whose weights were replaced: the finished job's results are of another model, and are refused
    with the run folder to delete, not returned."""
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_path, model)
    cfg = OmegaConf.create({"paths": {"output_dir": str(tmp_path / "run")}, "layer": 3})
    out, config, _ = job_state(cfg)
    info = load_encoder(str(model))[2]
    load_encoder(str(tiny_bert_path), random_init=True)  # weights drawn, not read: not recorded
    (tmp_path / "run").mkdir()
    write_results(out, {"dev": 0.5, "config": config}, "sclass_probe")
    assert json.loads(out.read_text())["model_weights"] == [[str(model.resolve()), info.weights_sha256]]
    assert job_state(cfg)[2]["dev"] == 0.5 and local_models_loaded() == []  # a new job records its own
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ConfigError) as error:
        job_state(cfg)
    assert_one_line_error(error.value, f"computed from the model {model.resolve()} as it was then, and its weights "
                                       f"have changed since", f"or delete the run folder {tmp_path / 'run'}")
    shutil.rmtree(model)  # gone: moved with its run folder, say; not checked
    assert job_state(cfg)[2]["dev"] == 0.5


def test_a_score_that_is_not_finite_is_written_as_null_with_a_warning(tmp_path, caplog, unstamped):
    """results.json is strict JSON: a NaN (an undefined score) is null, never the bare NaN token."""
    out = tmp_path / "results.json"
    results = {"dev": {"uuas": 0.5}, "test": {"uuas": math.nan, "dspr": 0.2}, "mix_weights": [0.5, math.inf],
               "warnings": ["trained briefly"]}
    with caplog.at_level(logging.WARNING, logger="probing.tasks.results_file"):
        write_results(out, results, "sclass_probe")
    written = json.loads(out.read_text(), parse_constant=lambda token: pytest.fail(f"{token} in results.json"))
    assert written["test"] == {"uuas": None, "dspr": 0.2} and written["mix_weights"] == [0.5, None]
    assert written["warnings"] == ["trained briefly", "`test.uuas` was not a finite number: recorded as null",
                                   "`mix_weights[1]` was not a finite number: recorded as null"]
    assert written == json.loads(json.dumps(results))  # what the job returns is what it wrote
    assert "`test.uuas` was not a finite number" in caplog.text
    with pytest.raises(ValueError, match="JSON compliant"):
        write_json_atomically(tmp_path / "other.json", {"score": math.nan})


def test_an_undefined_optimized_metric_is_nan_for_the_sweeper():
    assert math.isnan(optimized_value({"dev": {"uuas": None}}, "dev/uuas"))


@pytest.mark.parametrize("native,precision,message", [
    (False, "bf16-mixed", "bf16 is emulated"), (True, "32-true", "this CPU has bf16 units"),
    (True, "bf16-mixed", None), (False, "32-true", None)])
def test_the_precision_note_warns_of_emulation_and_hints_at_bf16_units(monkeypatch, caplog, native, precision,
                                                                        message):
    monkeypatch.setattr("probing.tasks.trainer.has_native_bf16", lambda device: native)
    note_precision.cache_clear()
    with caplog.at_level("INFO", logger="probing.tasks.trainer"):
        note_precision(precision, torch.device("cpu"))
        note_precision(precision, torch.device("cpu"))  # said once per process
    notes = [record.message for record in caplog.records]
    assert (notes == []) if message is None else (len(notes) == 1 and message in notes[0])
