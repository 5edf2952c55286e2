"""analyze.py analysis=lens: the logit lens and the tuned lens (Belrose et al. 2023) of a causal LM, in bits per token
of the actual next token on held-out sentences, layer by layer, beside the model's own cross-entropy.

The sentences of `analysis.sentences` are split at random (seeded) into the tuned lens's training text and the
held-out text that both lenses are scored on; see docs/lens.md.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import AutoConfig, PreTrainedTokenizerFast

from probing.analysis import Analysis, AnalysisInputs, analysis_device
from probing.data.sentences import Text
from probing.data.settings import require_int, require_number
from probing.errors import ConfigError, setting
from probing.features.hf_models import load_pretrained, model_location
from probing.probes.lens.readout import Readout, is_causal_lm
from probing.probes.lens.scoring import bits, score
from probing.probes.lens.tuned import TunedLens, TunedLensTraining, fit
from probing.report import lens as lens_report

log = logging.getLogger(__name__)

CAUSAL_FIX = "model=smollm2 (packaged), model=gpt2, or any causal LM (Llama, Qwen2, Gemma, GPT-NeoX, GPT-2)"


class LensAnalysis(Analysis):
    """conf/analysis/lens.yaml: the sentences (`split`, the first `max_sentences`), a share `held_out` of them held
    out (drawn with the job's `seed`), each cut to `max_length` tokens; the tuned lens trained for `epochs` over the
    rest in batches of `batch_size` sentences (SGD with Nesterov momentum `momentum`, `lr` decayed linearly to 0,
    `weight_decay`, gradients clipped to norm `clip`), on `device`."""

    report = lens_report
    from_the_job = ("seed",)

    def __init__(self, name: str, sentences: dict[str, Any], split: str, max_sentences: int | None,
                 held_out: float, max_length: int, batch_size: int, epochs: int, lr: float, momentum: float,
                 weight_decay: float, clip: float, device: str, seed: int):
        super().__init__(name, sentences, split, max_sentences)
        self.held_out = require_number(setting("held_out"), held_out, low=0.0, high=1.0, example="0.2")
        if not 0.0 < self.held_out < 1.0:
            raise ConfigError(f"{setting('held_out')}={held_out}: the share of the sentences held out must be "
                              f"between 0 and 1 (both kept out: the lens needs text to train on and text to be "
                              f"scored on). Fix: {setting('held_out')}=0.2")
        self.max_length, self.batch_size, self.epochs = (
            require_int(setting(key), value, minimum=minimum) for key, value, minimum in (
                ("max_length", max_length, 2), ("batch_size", batch_size, 1), ("epochs", epochs, 0)))
        self.lr = require_number(setting("lr"), lr, low=1e-12, example="0.1")
        self.momentum = require_number(setting("momentum"), momentum, low=0.0, high=1.0, example="0.9")
        self.weight_decay = require_number(setting("weight_decay"), weight_decay, low=0.0, example="0.001")
        self.clip = require_number(setting("clip"), clip, low=1e-12, example="1.0")
        self.device, self.seed = device, require_int("seed", seed)

    def check_inputs(self, inputs: AnalysisInputs) -> None:
        """Refuse a `layer=` (every layer is read), and a model that is no causal LM, before any weight loads."""
        super().check_inputs(inputs)
        try:
            config = AutoConfig.from_pretrained(model_location(str(inputs.model.name_or_path)),
                                                revision=inputs.model.revision)
        except Exception:  # loading the model, in run, says what is wrong in its own words
            return
        if not is_causal_lm(config):
            kind = (config.architectures or [config.model_type])[0]
            raise ConfigError(f"model={inputs.model.name} is {kind}, not a causal LM: analysis=lens reads each layer "
                              f"through the model's next-token head, which it has none of. Fix: {CAUSAL_FIX}")

    def run(self, inputs: AnalysisInputs, run_dir: Path) -> dict[str, Any]:
        device = analysis_device(self.device)
        texts, source = self.texts()
        train, held_out = split_sentences(len(texts), self.held_out, self.seed)
        model_settings = inputs.model
        model, tokenizer, info = load_pretrained(model_settings.name_or_path, **model_settings.load_arguments(),
                                                 causal_lm_head=True)
        model.to(device)
        encoded = encode(tokenizer, [running_text(text) for text in texts], self.max_length)
        readout = Readout.of(model)
        lens = TunedLens(info.num_layers, info.hidden_size)
        steps = self.epochs * -(-len(train) // self.batch_size)
        training = TunedLensTraining(model, readout, lens, self.lr, self.momentum, self.weight_decay, self.clip,
                                     steps)
        if self.epochs:
            generator = torch.Generator().manual_seed(self.seed)
            fit(training, DataLoader([encoded[i] for i in train], batch_size=self.batch_size, shuffle=True,
                                     generator=generator, collate_fn=padded(tokenizer)), self.epochs, device)
        scores = score(model, readout, lens, DataLoader([encoded[i] for i in held_out], batch_size=self.batch_size,
                                                        collate_fn=padded(tokenizer)), device).per_token()
        results = {
            **model_settings.described(), "weights_sha256": info.weights_sha256, "architecture": info.architecture,
            "num_layers": info.num_layers, "vocab_size": int(model.config.vocab_size), "sentence_source": source,
            "unit": "bits per token", "split": {
                "seed": self.seed, "held_out": self.held_out, "train_sentences": len(train),
                "held_out_sentences": len(held_out), "held_out_indices": held_out,
                "train_tokens": predicted_tokens(encoded, train), "held_out_tokens": scores["tokens"]},
            "training": {**self.settings(), "steps": steps,
                         "train_kl_bits_by_epoch": [[bits(kl) for kl in epoch] for epoch in training.epoch_kl]},
            "layers": scores["layers"], "model_bits": scores["model_bits"],
        }
        run_dir.mkdir(parents=True, exist_ok=True)
        self.report.plot_bits([results], run_dir / self.report.FIGURE)
        log.info("%s", self.report.summary_line(results))
        return results

    def settings(self) -> dict[str, Any]:
        return {"loss": "KL(final || lens)", "optimizer": "SGD, Nesterov momentum", "lr": self.lr,
                "momentum": self.momentum, "weight_decay": self.weight_decay, "clip": self.clip,
                "schedule": "linear decay to 0", "epochs": self.epochs, "batch_size": self.batch_size,
                "max_length": self.max_length}

    def metrics(self, results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """Each layer's bits per token, at the step of the layer; the model's own at the top layer's."""
        rows = [(row["layer"], {key: value for key, value in row.items() if key != "layer"})
                for row in results["layers"]]
        rows[-1][1]["model_bits"] = results["model_bits"]
        return rows


def running_text(text: Text) -> str:
    """A sentence as running text: its words joined by spaces (pre-split words), or its text (and second text)."""
    if text.words:
        return " ".join(text.words)
    return text.text if text.text_pair is None else f"{text.text} {text.text_pair}"


def split_sentences(count: int, held_out: float, seed: int) -> tuple[list[int], list[int]]:
    """(training, held-out) sentence indices, each sorted: round(held_out * count) held out (at least one of each),
    drawn with `seed`."""
    if count < 2:
        raise ConfigError(f"{count} sentence(s): the lens needs at least one to train on and one held out. Fix: more "
                          f"sentences ({setting('max_sentences')}=null, or another {setting('split')})")
    size = min(max(round(held_out * count), 1), count - 1)
    chosen = set(random.Random(seed).sample(range(count), size))
    return [i for i in range(count) if i not in chosen], sorted(chosen)


def encode(tokenizer: PreTrainedTokenizerFast, texts: list[str], max_length: int) -> list[list[int]]:
    """Each text's token ids (the tokenizer's special tokens included, e.g. Llama's BOS), cut to `max_length`."""
    return [list(ids) for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]


def padded(tokenizer: PreTrainedTokenizerFast):
    """The collate function of token-id lists: right-padded input_ids and the attention mask (B, T)."""
    def collate(rows: list[list[int]]) -> dict[str, torch.Tensor]:
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for index, row in enumerate(rows):
            input_ids[index, :len(row)] = torch.tensor(row, dtype=torch.long)
            attention_mask[index, :len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}
    return collate


def predicted_tokens(encoded: list[list[int]], indices: list[int]) -> int:
    """The next tokens predicted in these sentences: each sentence's tokens but its first."""
    return sum(max(len(encoded[i]) - 1, 0) for i in indices)
