"""Frozen Hugging Face encoders as featurizers (`WordEncoder`): tokenise words in context and pool the target's
wordpieces at the asked-for layers (mean, last or Nth piece; every layer by default, layer 0 included) of a site
(`probing.features.sites`), with a long sentence cut to a window centred on the target, a precision of its own and
an optional attention window. Where Zhao et al. 2020 leave room and what was chosen: docs/features.md."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Encoding
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from probing.data.records import SkipCounter, WordInContext
from probing.data.settings import require_bool, require_int
from probing.devices import check_precision
from probing.errors import ConfigError, setting
from probing.features.attention import (
    DEFAULT_POLICY,
    check_window_support,
    model_attention_mask,
    parse_attention_policy,
    parse_attention_window,
)
from probing.features.featurizer import PreparedInput, context_label, context_window, parse_context_size
from probing.features.hf_models import (
    PACKAGED_PREFIX,
    check_weights_dtype,
    checked_device_map,
    input_device,
    load_pretrained,
    weights_dtype_for,
)
from probing.features.sites import RESIDUAL, capture, parse_site, resolve_layers

POOLINGS = ("mean", "last")  # and `token<N>`: the target's piece N alone (N < 0 counts from its end; `pooled_position`)
POSITION_POOLING = re.compile(r"token(-?\d+)")
AUTOCAST_DTYPES = {"32": None, "bf16": torch.bfloat16, "16": torch.float16}
PRECISION_TAGS = {"32": "", "bf16": ".bf16", "16": ".fp16"}  # in the store's file name
DTYPE_TAGS = {"fp32": "", "bf16": ".weights-bf16", "fp16": ".weights-fp16"}  # the weights' dtype, in it too
DEFAULT_MAX_LENGTH = 128  # features.max_length's default: its stores' names carry no length tag, as before the tag
SKIP_TOO_LONG = "target longer than max_length"
SKIP_NO_PIECES = "target word has no wordpieces"
SKIP_NO_POSITION = "target has fewer pieces than the pooled position needs"


def resolve_device(device: str) -> torch.device:
    """"auto" -> cuda when available, else cpu; anything else as torch understands it."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def centred_window(first: int, stop: int, total: int, width: int) -> tuple[int, int]:
    """[start, end) of a `width`-piece window over `total` pieces that holds [first, stop), centred on it
    (left context = half the spare room, rounded down) and shifted inwards at the sentence edges."""
    if total <= width:
        return 0, total
    spare = width - (stop - first)
    start = min(max(0, first - spare // 2), total - width)
    return start, start + width


def pooled_position(pooling: str) -> int | None:
    """The piece that `token<N>` pooling takes (N: 0 the target's first piece, -1 its last, -2 the one before); None
    for mean and last."""
    match = POSITION_POOLING.fullmatch(pooling)
    return int(match.group(1)) if match else None


def pooling_index(target_pieces: Sequence[Sequence[int]],
                  pooling: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which (record, piece) positions are pooled, and with what weight: 1/n on each of a record's n target
    pieces (mean), 1 on its last piece (last) or on its piece N (`token<N>`, every record having that piece: see
    `WordEncoder.prepare_many`). Returns (rows, cols, weights), one entry per pooled piece."""
    position = pooled_position(pooling)
    if pooling == "last":
        target_pieces = [pieces[-1:] for pieces in target_pieces]
    elif position is not None:
        target_pieces = [[pieces[position]] for pieces in target_pieces]
    counts = torch.tensor([len(pieces) for pieces in target_pieces])
    rows = torch.repeat_interleave(torch.arange(len(target_pieces)), counts)
    cols = torch.tensor([piece for pieces in target_pieces for piece in pieces])
    return rows, cols, (1.0 / counts)[rows]


def pool_layers(hidden_states: Sequence[torch.Tensor], rows: torch.Tensor, cols: torch.Tensor,
                weights: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(B, num_layers, D): the weighted sum of each record's pooled pieces, at every layer.

    Only the pooled pieces are gathered from each layer (P rows, not the B x T x D states), then summed per
    record with one index_add over all layers at once.
    """
    # (P, L, D); each layer gathered on its own device (a sharded model's are on several), then brought together
    pieces = torch.stack([layer[rows.to(layer.device), cols.to(layer.device)].to(rows.device)
                          for layer in hidden_states], dim=1).float()
    pooled = torch.zeros(batch_size, *pieces.shape[1:], dtype=pieces.dtype, device=pieces.device)
    return pooled.index_add_(0, rows, pieces * weights[:, None, None])


def in_dtype(pooled: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float32 `pooled` in `dtype`, cast where it is (no wait for the device): a value too large for float16 becomes
    inf, which extraction catches on the host and computes again in float32 (`probing.features.extraction`)."""
    return pooled if dtype == pooled.dtype else pooled.to(dtype)


@dataclass
class EncoderBatch:
    """One batch as `WordEncoder.collate` makes it: (B, T) input ids and padding mask, the pooling index (rows, cols,
    weights: `pooling_index`), and the inputs themselves where an attention window needs their word ids."""

    input_ids: torch.Tensor
    padding_mask: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    weights: torch.Tensor
    inputs: list[PreparedInput] | None = None


class WordEncoder:
    """Turns word-in-context records into (num_layers, hidden) vectors of a frozen encoder (a `Featurizer`).

    Built by Hydra from `features.encoder` (conf/features/default.yaml). `context_size`: words on each side of the
    target, or None / "all" for the whole sentence. `attention_window`: words each word may attend to on each side,
    None for the model's full attention; `attention_policy`: where the special tokens stand under a window
    (`probing.features.attention.POLICIES`). `precision`: "32", "bf16" or "16" (see `check_precision`). `layers`:
    the hidden states computed and kept (None: all), at `site` (`probing.features.sites.SITES`). `dtype`: the
    weights' ("fp32", "bf16", "fp16"; None: bf16 for precision bf16 on CUDA, else fp32: `weights_dtype_for`; see
    `check_weights_dtype`), whose forward runs in them with no autocast; `device_map`: accelerate's placement of a
    model sharded over devices (then `device` must be "auto"); `gguf_file`, `cache_dir`: a GGUF model and where its
    converted copy is cached (`probing.features.hf_models.load_encoder`); `pad_to_multiple_of`: a batch's padded
    length rounded up to a multiple of it (`padded_width`)."""

    def __init__(
        self,
        name_or_path: str,
        pooling: str = "mean",
        max_length: int = DEFAULT_MAX_LENGTH,
        context_size: int | str | None = None,
        device: str = "cpu",
        revision: str | None = None,
        precision: str = "32",
        random_init: bool = False,
        init_seed: int = 0,
        attention_window: int | None = None,
        allow_emulated_bf16: bool = False,
        attention_policy: str = DEFAULT_POLICY,
        layers: Sequence[int] | None = None,
        site: str = RESIDUAL,
        dtype: str | None = None,
        device_map: str | dict | None = None,
        gguf_file: str | None = None,
        cache_dir: str | None = None,
        pad_to_multiple_of: int = 1,
    ):
        precision = str(precision)
        _check_options(pooling, precision)
        self.site = parse_site(site)
        self.pooling, self.context_size = pooling, parse_context_size(context_size)
        self.max_length = require_int("features.max_length", max_length, minimum=1)
        self.device_map = checked_device_map(device_map)
        if self.device_map is not None and device != "auto":
            raise ConfigError(f"{setting('device_map')}={self.device_map} places the model itself, on the devices "
                              f"there are, so {setting('device')}={device} cannot. Fix: {setting('device')}=auto")
        self.device = resolve_device(device)
        allow_emulated = require_bool("features.allow_emulated_bf16", allow_emulated_bf16)
        check_precision(precision, self.device, allow_emulated)
        self.dtype = weights_dtype_for(dtype, precision, self.device)
        check_weights_dtype(self.dtype, precision, self.device, allow_emulated)
        if self.dtype != "fp32":  # the forward runs in the weights' own dtype, not under autocast: recorded so
            precision = "32"
        self.precision, self.autocast_dtype = precision, AUTOCAST_DTYPES[precision]
        self.pad_to_multiple_of = require_int(setting("pad_to_multiple_of"), pad_to_multiple_of, minimum=1)
        self.random_init = require_bool("model.random_init", random_init)
        self.init_seed = require_int("model.init_seed", init_seed)
        self.attention_window = parse_attention_window(attention_window)
        self.attention_policy = parse_attention_policy(attention_policy)
        self.model, self.tokenizer, self.info = load_pretrained(
            name_or_path, revision, self.random_init, self.init_seed, dtype=self.dtype, device_map=self.device_map,
            gguf_file=gguf_file, cache_dir=cache_dir)
        if self.device_map is None:
            self.model.to(self.device)
        else:  # inputs go where the first layer is; the pooled vectors are gathered there
            self.device = input_device(self.model)
        self.layers = resolve_layers(layers, self.info.num_layers, self.site, self.info.model_name)
        self.causal = self.attention_window is not None and check_window_support(self.model)
        self.piece_budget = self.input_length() - self.tokenizer.num_special_tokens_to_add()
        if self.piece_budget < 1:
            raise ConfigError(
                f"max_length={max_length} leaves no room besides the model's special tokens."
                " Fix: raise features.max_length"
            )
        self.skips = SkipCounter()

    def input_length(self) -> int:
        """The longest input fed to the model: `max_length`, or the model's position count where that is smaller
        (a sentence longer than the model can read is then windowed around its target as any long sentence is;
        `max_length` itself stays what the store records, so stores do not change with the cap)."""
        positions = getattr(self.model.config, "max_position_embeddings", None)
        return min(self.max_length, positions) if positions else self.max_length

    @property
    def store_name(self) -> str:
        """The store folder of this encoder's features: its name, tagged when the weights are re-initialised. A
        local folder (e.g. a fine-tuned model, `<train run>/model`) is named by its last two path parts and its
        weights hash, so that two models in one folder, one after the other, never share a store, while two folders
        with identical weights under different parents (`A/ft/model`, `B/ft/model`) do: the store compares the
        weights hash, and takes the model's name and path as provenance only."""
        name = self.info.model_name
        if not name.startswith(PACKAGED_PREFIX) and Path(self.info.model_path).exists():  # a folder, or a GGUF file
            folder = Path(self.info.model_path).resolve()
            name = f"{folder.parent.name}-{folder.name}-{self.info.weights_sha256[:10]}"
        return f"{name}-random-init-seed{self.init_seed}" if self.random_init else name

    @property
    def store_kind(self) -> str:
        """What the features are, in the store's file name: the pooling of the target's wordpieces, the attention
        window and its policy where there is one, the sites and layers (`sites_tag`), `max_length` unless the default,
        and the forward precision and the weights' dtype unless float32 (each tag absent at its default, so that
        stores written before it existed keep their names)."""
        window = "" if self.attention_window is None else f".attn-{self.attention_window}-{self.attention_policy}"
        return f"{self.pooling}{window}{self.forward_tags}"

    @property
    def forward_tags(self) -> str:
        """The tags of `store_kind` after the pooling and the window: sites and layers, max length, precision and the
        weights' dtype."""
        length = "" if self.max_length == DEFAULT_MAX_LENGTH else f".len-{self.max_length}"
        return f"{self.sites_tag}{length}{PRECISION_TAGS[self.precision]}{DTYPE_TAGS[self.dtype]}"

    @property
    def every_layer(self) -> bool:
        """Whether the features are the residual stream at every layer (the defaults, as before sites existed)."""
        return self.site == RESIDUAL and self.layers == list(range(self.info.num_layers))

    @property
    def sites_tag(self) -> str:
        """The site and layers in the store's file name: none for the residual stream at every layer (so that those
        stores keep their names), else `.<site>` unless the residual stream and `.layers-<runs>` (`0to2-5`)."""
        if self.every_layer:
            return ""
        site = "" if self.site == RESIDUAL else f".{self.site}"
        return f"{site}.layers-{layer_runs(self.layers)}"

    def store_metadata(self) -> dict:
        """What identifies these features in a store's metadata (compared when a store is reused)."""
        info = self.info
        metadata = {
            "model_name": info.model_name, "model_path": info.model_path, "weights_sha256": info.weights_sha256,
            "tokenizer_class": info.tokenizer_class, "tokenizer_sha256": info.tokenizer_sha256,
            "architecture": info.architecture, "num_layers": len(self.layers), "hidden_size": info.hidden_size,
            "pooling": self.pooling, "context_size": context_label(self.context_size),
            "max_length": self.max_length, "precision": self.precision,
        }
        if self.random_init:
            metadata |= {"random_init": True, "init_seed": self.init_seed}
        if self.dtype != "fp32":  # absent for float32 weights, as in stores written before the option
            metadata |= {"weights_dtype": self.dtype}
        if self.attention_window is not None:  # absent for full attention, as in stores written before the option
            metadata |= {"attention_window": self.attention_window, "attention_policy": self.attention_policy}
        if not self.every_layer:  # absent for the residual stream at every layer, as before sites and layers existed
            metadata |= {"site": self.site, "layers": self.layers}
        return metadata

    def prepare_many(self, records: Sequence[WordInContext]) -> list[PreparedInput | None]:
        """Tokenise records in one batched call; None (with a counted skip) where the target cannot be encoded."""
        if not records:
            return []
        windows = [context_window(record, self.context_size) for record in records]
        encoded = self.tokenizer(
            [list(words) for words, _ in windows], is_split_into_words=True, add_special_tokens=False
        )
        return [
            self._prepare_one(record, target, encoding)
            for record, (_, target), encoding in zip(records, windows, encoded.encodings)
        ]

    def _prepare_one(self, record: WordInContext, target: tuple[int, ...], encoding: Encoding) -> PreparedInput | None:
        target_words = set(target)
        pieces = [i for i, word in enumerate(encoding.word_ids) if word in target_words]
        if {encoding.word_ids[i] for i in pieces} != target_words:
            self.skips.skip(SKIP_NO_PIECES, record.source)
            return None
        if pieces[-1] + 1 - pieces[0] > self.piece_budget:
            self.skips.skip(SKIP_TOO_LONG, record.source)
            return None
        position = pooled_position(self.pooling)
        if position is not None and not -len(pieces) <= position < len(pieces):
            self.skips.skip(SKIP_NO_POSITION, record.source)
            return None
        start, end = centred_window(pieces[0], pieces[-1] + 1, len(encoding.ids), self.piece_budget)
        encoding.truncate(end, direction="right")
        encoding.truncate(end - start, direction="left")
        final = self._with_special_tokens(encoding)
        return PreparedInput(
            input_ids=list(final.ids),
            target_pieces=[i for i, word in enumerate(final.word_ids) if word in target_words],
            word_ids=None if self.attention_window is None else list(final.word_ids),
        )

    def _with_special_tokens(self, encoding: Encoding) -> Encoding:
        """Add the model's special tokens with the tokenizer's own post-processor (as a plain call would);
        word ids survive, special tokens get None."""
        post_processor = self.tokenizer.backend_tokenizer.post_processor
        return encoding if post_processor is None else post_processor.process(encoding)

    def encode(self, batch: Sequence[PreparedInput], on_device: bool = False,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(B, len(layers), hidden) pooled target vectors at each asked-for layer (by default every layer, layer 0
        included), on the CPU (`on_device`: on the encoder's device): summed in float32, then cast to `dtype` on the
        device (a float16 store's rows are copied back at half the bytes; `in_dtype`)."""
        if not batch:
            return torch.empty(0, len(self.layers), self.info.hidden_size, dtype=dtype)
        return self.encode_collated(self.collate(batch), on_device, dtype)

    def collate(self, batch: Sequence[PreparedInput]) -> EncoderBatch:
        """The host side of `encode` (extraction runs it ahead, in another thread): the padded input ids (to
        `padded_width`), the padding mask and the pooling index, in pinned memory when the device is CUDA (so that
        their copies are asynchronous)."""
        input_ids = pad_sequence([torch.tensor(prepared.input_ids) for prepared in batch], batch_first=True,
                                 padding_value=self.tokenizer.pad_token_id)
        input_ids = nn.functional.pad(input_ids, (0, self.padded_width(input_ids.shape[1]) - input_ids.shape[1]),
                                      value=self.tokenizer.pad_token_id)
        lengths = torch.tensor([len(prepared.input_ids) for prepared in batch])
        padding_mask = (torch.arange(input_ids.shape[1]) < lengths[:, None]).long()
        rows, cols, weights = pooling_index([prepared.target_pieces for prepared in batch], self.pooling)
        tensors = (input_ids, padding_mask, rows, cols, weights)
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):  # the prefetch thread's own current device is the first GPU
                tensors = tuple(tensor.pin_memory() for tensor in tensors)
        return EncoderBatch(*tensors, inputs=None if self.attention_window is None else list(batch))

    def encode_collated(self, batch: EncoderBatch, on_device: bool = False,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """`encode` of a collated batch: its tensors copied to the device without waiting, the forward, the pooling
        on the device, cast to `dtype` there (only the pooled rows come back, when not `on_device`)."""
        attention_mask = batch.padding_mask if batch.inputs is None else self._attention_mask(batch.inputs,
                                                                                               batch.padding_mask)
        with torch.inference_mode():
            input_ids, attention_mask, rows, cols, weights = (
                tensor.to(self.device, non_blocking=True)
                for tensor in (batch.input_ids, attention_mask, batch.rows, batch.cols, batch.weights))
            states = self.hidden_states(input_ids, attention_mask)
            pooled = in_dtype(pool_layers(states, rows, cols, weights, len(batch.input_ids)), dtype)
        return pooled if on_device else pooled.cpu()

    def padded_width(self, longest: int) -> int:
        """The padded length of a batch whose longest input is `longest`: rounded up to `pad_to_multiple_of` (so that
        batch shapes repeat, and a GPU reuses the kernels it chose for them; padding is masked, so no vector changes),
        within the longest input the model reads."""
        rounded = -(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of
        return max(longest, min(rounded, self.input_length()))

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        """The (B, T, D) states of the asked-for layers at the site, on the encoder's device, from one forward pass
        in the forward precision that stops after the last of them (`probing.features.sites.capture`)."""
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            return capture(self.model, input_ids.to(self.device), attention_mask.to(self.device), self.layers,
                           self.site, out_device=self.device)

    def _attention_mask(self, batch: Sequence[PreparedInput], padding_mask: torch.Tensor) -> torch.Tensor:
        """The (B, T) padding mask, or with an attention window the model's (B, 1, T, T) window mask."""
        if self.attention_window is None:
            return padding_mask
        if any(prepared.word_ids is None for prepared in batch):
            raise ValueError("attention_window needs word_ids in every PreparedInput (set by prepare_many)")
        word_ids = [prepared.word_ids for prepared in batch]
        return model_attention_mask(self.model, word_ids, self.attention_window, padding_mask, causal=self.causal,
                                    policy=self.attention_policy)


def layer_runs(layers: Sequence[int]) -> str:
    """Sorted layers written as runs: [0, 1, 2, 5] -> `0to2-5`."""
    runs: list[list[int]] = []
    for layer in layers:
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    return "-".join(f"{run[0]}to{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def _check_options(pooling: str, precision: str) -> None:
    if pooling not in POOLINGS and pooled_position(pooling) is None:
        raise ConfigError(f"Unknown pooling '{pooling}'. Fix: {setting('pooling')}=mean, last, or token<N> (the "
                          "target's piece N alone: token0 its first, token-2 the one before its last)")
    if precision not in AUTOCAST_DTYPES:
        raise ConfigError(f"Unknown precision '{precision}'. Fix: {setting('precision')}=32, bf16 or 16")
