"""Each entry script as a newcomer types it, with the default logger (CSV + W&B, offline without a key): the other
end-to-end tests choose `logger=csv`, which would miss a W&B setting that only the default composes."""

from __future__ import annotations

import json

from tests.helpers import FIXTURE_STREUSLE, run_script
from tests.tasks.test_common import FAKE_KEY, refusing_address


def offline_wandb_runs(run_dir):
    return sorted((run_dir / "wandb").glob("offline-run-*"))


def assert_no_library_noise(result):
    """Filtered out: wandb's warning about the `anonymous` setting that Lightning always passes, and Lightning's
    advertisement for its cloud logger."""
    output = result.stdout + result.stderr
    assert "anonymous" not in output and "Tip:" not in output, output[-3000:]


def test_probe_with_the_default_logger(tmp_path, tiny_bert_path):
    run = tmp_path / "run"
    result = run_script("probe.py", f"model.name_or_path={tiny_bert_path}", f"data.source.paths=[{FIXTURE_STREUSLE}]",
                        "layer=1", "trainer.max_epochs=2", f"hydra.run.dir={run}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run / "csv" / "metrics.csv").is_file() and len(offline_wandb_runs(run)) == 1
    config = json.loads((run / "results.json").read_text())["config"]
    assert config["logger"]["wandb"]["name"] == "minilm-streusle-layer1-sclass_mlp-seed0"  # model, data, layer, probe
    assert_no_library_noise(result)


def test_train_with_the_default_logger(tmp_path, tiny_bert_path):
    """The fault this guards: train.py's W&B run name interpolated `layer`, which only probe.py's config has."""
    run = tmp_path / "run"
    result = run_script("train.py", f"model.name_or_path={tiny_bert_path}", "trainer.max_epochs=1",
                        "task.batch_size=64", f"hydra.run.dir={run}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run / "csv" / "metrics.csv").is_file() and len(offline_wandb_runs(run)) == 1
    results = json.loads((run / "results.json").read_text())
    assert results["config"]["logger"]["wandb"]["name"] == "minilm-pos-seed0"
    assert_no_library_noise(result)
    assert (run / "model" / "task.json").is_file()


def test_extract_and_analyze_as_typed(tmp_path, tiny_bert_path):
    """extract.py has no logger; analyze.py logs to CSV by default and to W&B with logger=default."""
    model = f"model.name_or_path={tiny_bert_path}"
    extracted = run_script("extract.py", model, f"data.source.paths=[{FIXTURE_STREUSLE}]", cwd=tmp_path)
    assert extracted.returncode == 0, extracted.stderr[-3000:]
    assert len(list((tmp_path / "stores").rglob("*.h5"))) == 3
    run = tmp_path / "analysis"
    analysed = run_script("analyze.py", "analysis=isotropy", model, "logger=default", f"hydra.run.dir={run}",
                          cwd=tmp_path)
    assert analysed.returncode == 0, analysed.stderr[-3000:]
    assert (run / "csv" / "metrics.csv").is_file() and len(offline_wandb_runs(run)) == 1
    config = json.loads((run / "results.json").read_text())["config"]
    assert config["logger"]["wandb"]["name"] == "minilm-isotropy-layerNone-seed0"


def test_a_key_without_a_reachable_server_logs_offline_with_a_warning(tmp_path, tiny_bert_path):
    """WANDB_API_KEY set, WANDB_MODE unset, the server unreachable: wandb itself would wait two minutes, then fail the
    run; the run logs offline instead, says so once, and writes the key nowhere."""
    run = tmp_path / "run"
    result = run_script("probe.py", f"model.name_or_path={tiny_bert_path}", f"data.source.paths=[{FIXTURE_STREUSLE}]",
                        "layer=1", "trainer.max_epochs=1", f"hydra.run.dir={run}", cwd=tmp_path,
                        environment={"WANDB_MODE": None, "WANDB_API_KEY": FAKE_KEY,
                                     "WANDB_BASE_URL": f"http://{refusing_address()}"})
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert output.count("WANDB_API_KEY is set, but the W&B server cannot be reached") == 1, output[-3000:]
    assert len(offline_wandb_runs(run)) == 1
    assert FAKE_KEY not in output
    assert not [path for path in run.rglob("*") if path.is_file() and FAKE_KEY.encode() in path.read_bytes()]
