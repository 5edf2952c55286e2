"""A GGUF model converted once into a safetensors folder (model + tokenizer, `save_pretrained`) and cached, keyed by
the GGUF file's SHA-256: transformers de-quantises a GGUF file to float when it loads it (minutes for SmolLM2-135M on
2 cores), so the second run loads the cached folder instead. The folder is written under a temporary name and renamed
when complete, under a lock (`probing.locks`), so two runs never convert at once and none reads a half-written one."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from probing.data.text import sha256_files
from probing.errors import ModelLoadError
from probing.locks import holding, open_lock_file

log = logging.getLogger(__name__)

SOURCE_FILE = "gguf_source.json"  # in a cached folder: the GGUF file it was converted from, and its SHA-256
CONVERSION_WAIT_S = 6 * 3600.0  # how long a run waits while another converts the same file
DEFAULT_CACHE_DIR = "~/.cache/probing/models"
CACHE_ENV = "PROBING_MODEL_CACHE_DIR"


def default_cache_dir() -> Path:
    """Where converted models are cached when no folder is given: $PROBING_MODEL_CACHE_DIR, else
    ~/.cache/probing/models (a preset's `model.cache_dir` is null, so it reads the same)."""
    return Path(os.path.expanduser(os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR))


def gguf_sha256(gguf_path: str | Path) -> str:
    return sha256_files([gguf_path])


def convert_gguf(gguf_path: Path, out: Path) -> None:
    """De-quantise the GGUF file into `out` as a safetensors folder: the causal LM (its head kept, for a lens) and
    its fast tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    # transformers refuses to save a model it read from GGUF (marked quantised, though its weights are float now):
    # the same architecture built from the config, with the loaded weights, saves as any model.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(out)


def cached_gguf_folder(gguf_path: str | Path, cache_dir: str | Path | None = None,
                       convert: Callable[[Path, Path], None] | None = None,
                       wait_s: float = CONVERSION_WAIT_S) -> tuple[Path, str]:
    """The cached safetensors folder of `gguf_path` (converted by `convert(gguf, folder)`, default `convert_gguf`, on
    the first call) and the GGUF file's SHA-256. The folder is `<cache_dir>/<file stem>-<sha256[:16]>`: another
    file, or the same file changed, gets a folder of its own."""
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise ModelLoadError(f"Cannot load the GGUF file {gguf_path}: it does not exist. Fix: point gguf_file at an "
                             "existing .gguf file (a name inside the model folder, or an absolute path)")
    digest = gguf_sha256(gguf_path)
    cache_dir = Path(os.path.expanduser(str(cache_dir))) if cache_dir else default_cache_dir()
    folder = cache_dir / f"{gguf_path.stem}-{digest[:16]}"
    if folder.is_dir():
        return folder, digest
    try:
        lock_fd = open_lock_file(cache_dir / f".{folder.name}.lock")
    except OSError as error:
        raise ModelLoadError(f"Cannot cache the converted GGUF model in {cache_dir} ({error}). Fix: point "
                             f"model.cache_dir (or env {CACHE_ENV}) at a writable folder") from error

    def refused(holder: str) -> ModelLoadError:
        return ModelLoadError(f"{folder}: another run (pid {holder}) is still converting {gguf_path.name} after "
                              f"{wait_s:g} s. Fix: wait for it to finish, then rerun")

    with holding(lock_fd, refused, wait_s=wait_s,
                 waiting=f"waiting while another run converts {gguf_path.name} into {folder}"):
        if folder.is_dir():  # the other run finished it while this one waited
            return folder, digest
        log.info("converting %s to safetensors once (de-quantised; minutes on a CPU), cached in %s", gguf_path, folder)
        partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=cache_dir))
        try:
            partial.chmod(0o755)  # readable by all, as a folder made by mkdir is
            (convert or convert_gguf)(gguf_path, partial)
            source = {"gguf_file": str(gguf_path), "gguf_sha256": digest}
            (partial / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n", encoding="utf-8")
            os.rename(partial, folder)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    return folder, digest
