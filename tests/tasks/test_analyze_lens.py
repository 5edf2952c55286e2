"""analyze.py analysis=lens as a user runs it, on a tiny random Llama: results.json (its seeded split recorded), the
plot and the report section with a row per layer and the model's own cross-entropy; an encoder, or settings that
cannot work, refused with one error line."""

from __future__ import annotations

import json
import math

import pytest

from probing.errors import ConfigError
from probing.report import write_report
from probing.tasks import analyze
from tests.helpers import run_script
from tests.helpers.runs import compose_job
from tests.probes.lens.models import LAYERS, save_causal_lm

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return save_causal_lm(tmp_path_factory.mktemp("tiny_llama"), "llama")


def lens_job(tmp_path, model, *overrides):
    return compose_job("analyze", tmp_path, "analysis=lens", f"model.name_or_path={model}", "model.name=tiny",
                       "analysis.max_sentences=20", "analysis.epochs=2", "analysis.batch_size=4", *overrides)


def test_a_run_writes_its_layers_in_bits_its_split_plot_and_report_section(tmp_path, tiny_llama):
    results = analyze.run(lens_job(tmp_path, tiny_llama, "seed=3"))
    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    assert (results["analysis"], results["kind"], results["unit"]) == ("lens", "lens", "bits per token")
    assert [row["layer"] for row in results["layers"]] == list(range(LAYERS + 1))
    assert results["num_layers"] == LAYERS + 1 and results["architecture"] == "LlamaForCausalLM"
    split = results["split"]
    assert (split["seed"], split["train_sentences"], split["held_out_sentences"]) == (3, 16, 4)
    assert len(split["held_out_indices"]) == 4 and split["held_out_tokens"] > 0
    again = analyze.run(lens_job(tmp_path / "again", tiny_llama, "seed=3"))
    assert again["split"] == split and again["layers"] == results["layers"]  # seeded: the same numbers
    other = analyze.run(lens_job(tmp_path / "other", tiny_llama, "seed=4"))
    assert other["split"]["held_out_indices"] != split["held_out_indices"]
    top = results["layers"][-1]
    assert top["logit_lens_bits"] == top["tuned_lens_bits"] == pytest.approx(results["model_bits"], rel=1e-6)
    # a random model's predictions are near uniform: about log2(V) bits per token
    assert results["model_bits"] == pytest.approx(math.log2(results["vocab_size"]), rel=0.1)
    assert len(results["training"]["train_kl_bits_by_epoch"]) == 2
    assert (run / "lens_bits_by_layer.png").read_bytes().startswith(PNG_MAGIC)
    write_report(run, tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Logit lens and tuned lens (Belrose et al. 2023)" in report
    assert f"| {LAYERS} | {top['logit_lens_bits']:.3f} | {top['tuned_lens_bits']:.3f} |" in report
    assert f"| model | {results['model_bits']:.3f} |" in report
    assert (tmp_path / "report" / "lens_bits_by_layer.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(("overrides", "message"), [
    (["layer=2"], "layer=2: analysis=lens does not read `layer`"),
    (["analysis.held_out=0"], "analysis.held_out=0: the share of the sentences held out must be between 0 and 1"),
    (["analysis.max_sentences=1"], "1 sentence(s): the lens needs at least one to train on and one held out. "
                                   "Fix: more sentences (analysis.max_sentences=null, or another analysis.split)"),
])
def test_settings_that_cannot_work_are_one_error_line(tmp_path, tiny_llama, overrides, message):
    with pytest.raises(ConfigError) as error:
        analyze.run(lens_job(tmp_path, tiny_llama, *overrides))
    assert message in str(error.value) and "Fix:" in str(error.value) and "\n" not in str(error.value)


def test_an_encoder_is_refused_in_one_error_line_naming_the_model(tmp_path, tiny_bert_path):
    result = run_script("analyze.py", "analysis=lens", f"model.name_or_path={tiny_bert_path}", "model.name=tiny",
                        f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(errors) == 1 and "model=tiny is BertModel, not a causal LM" in errors[0], errors
    assert "Fix: model=smollm2" in errors[0]
    assert not (tmp_path / "run" / "results.json").exists()
