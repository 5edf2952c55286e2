"""Tokenised batches of a fine-tuning task (probing.data.tasks.TaskData) for the FineTuner.

Token tasks are tokenised from their words (`is_split_into_words`), so each wordpiece knows its word; a word is
classified from its last wordpiece. Sentences longer than `max_length` wordpieces (128, Table 4) are cut at the end,
as Zhao et al. and Devlin et al. do: the words cut off are not scored, and their number is counted per split
(`cut_words`) and reported. Sentence tasks tokenise the text (pair) with the model's own special tokens.

`batch_size` is the global batch, as in Table 4: with several processes (DDP) each takes batch_size / world size
examples per step, so that the optimisation does not change with the number of devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import lightning as L
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from probing.data.tasks import TaggedSentence, TaskData, TextExample
from probing.errors import ConfigError
from probing.finetune.metrics import IGNORE

PAD_WORD = -1  # word id of special tokens and padding; last_piece of the slots past a sentence's last word


@dataclass
class Encoded:
    """One example ready to batch: wordpiece ids, the word of each piece, and its label(s)."""

    input_ids: list[int]
    word_ids: list[int]
    labels: list[int] | int
    last_piece: list[int] | None = None  # token tasks: position of each scored word's last piece


def encode_tagged(sentences: Sequence[TaggedSentence], tokenizer, label_ids: dict[str, int],
                  max_length: int) -> tuple[list[Encoded], int]:
    """Token-task examples and the number of words not scored: cut off by max_length (a word is kept whole or not
    at all), or without any wordpiece."""
    budget = max_length - tokenizer.num_special_tokens_to_add()
    encodings = tokenizer([list(s.tokens) for s in sentences], is_split_into_words=True,
                          add_special_tokens=False).encodings
    post_processor = tokenizer.backend_tokenizer.post_processor
    examples, cut = [], 0
    for sentence, encoding in zip(sentences, encodings):
        encoding.truncate(whole_words_within(encoding.word_ids, budget), direction="right")
        if post_processor is not None:
            encoding = post_processor.process(encoding)
        words = [PAD_WORD if word is None else word for word in encoding.word_ids]
        last_piece = {word: position for position, word in enumerate(words) if word != PAD_WORD}
        kept = sorted(last_piece)
        cut += len(sentence.tokens) - len(kept)
        examples.append(Encoded(list(encoding.ids), words, [label_ids[sentence.tags[w]] for w in kept],
                                [last_piece[w] for w in kept]))
    return examples, cut


def whole_words_within(word_ids: Sequence[int | None], budget: int) -> int:
    """How many leading wordpieces to keep: at most `budget`, ending where a word ends."""
    if len(word_ids) <= budget:
        return len(word_ids)
    keep = budget
    while keep > 0 and word_ids[keep - 1] == word_ids[keep]:
        keep -= 1
    return keep


def encode_texts(texts: Sequence[TextExample], tokenizer, label_ids: dict[str, int],
                 max_length: int) -> list[Encoded]:
    """Sentence-task examples: the text, or the pair, with the model's special tokens."""
    pairs = [text.text_pair for text in texts]
    encodings = tokenizer([text.text for text in texts], pairs if any(p is not None for p in pairs) else None,
                          truncation=True, max_length=max_length).encodings
    return [Encoded(list(encoding.ids), [PAD_WORD if word is None else word for word in encoding.word_ids],
                    label_ids[text.label]) for text, encoding in zip(texts, encodings)]


class TaskDataModule(L.LightningDataModule):
    """Train and dev batches of one task (dev is Lightning's validation set), padded per batch."""

    def __init__(self, data: TaskData, tokenizer, max_length: int = 128, batch_size: int = 32,
                 eval_batch_size: int | None = None):
        super().__init__()
        if max_length < 3:
            raise ConfigError(f"task.max_length={max_length} leaves no room for words. Fix: task.max_length=128")
        self.data, self.tokenizer, self.max_length = data, tokenizer, max_length
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.label_ids = {label: i for i, label in enumerate(data.labels)}
        self.examples: dict[str, list[Encoded]] = {}
        self.cut_words: dict[str, int] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.examples:
            return
        for split, records in self.data.splits.items():
            if self.data.token_level:
                self.examples[split], self.cut_words[split] = encode_tagged(
                    records, self.tokenizer, self.label_ids, self.max_length)
            else:
                self.examples[split] = encode_texts(records, self.tokenizer, self.label_ids, self.max_length)

    def per_device(self, batch_size: int) -> int:
        world = self.trainer.world_size if self.trainer is not None else 1
        if batch_size % world:
            raise ConfigError(f"task.batch_size={batch_size} is the global batch and must divide evenly over "
                              f"{world} processes. Fix: a multiple of {world}")
        return batch_size // world

    def _loader(self, split: str, batch_size: int, shuffle: bool) -> DataLoader:
        return DataLoader(self.examples[split], batch_size=self.per_device(batch_size), shuffle=shuffle,
                          collate_fn=self.collate)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("dev", self.eval_batch_size, shuffle=False)

    def collate(self, examples: list[Encoded]) -> dict[str, torch.Tensor]:
        def padded(rows, value):
            return pad_sequence([torch.tensor(row, dtype=torch.long) for row in rows], batch_first=True,
                                padding_value=value)

        batch = {"input_ids": padded([e.input_ids for e in examples], self.tokenizer.pad_token_id),
                 "attention_mask": padded([[1] * len(e.input_ids) for e in examples], 0),
                 "word_ids": padded([e.word_ids for e in examples], PAD_WORD)}
        if self.data.token_level:
            batch["labels"] = padded([e.labels for e in examples], IGNORE)
            batch["last_piece"] = padded([e.last_piece for e in examples], PAD_WORD)
        else:
            batch["labels"] = torch.tensor([e.labels for e in examples], dtype=torch.long)
        return batch

    def summary(self) -> dict[str, dict[str, int]]:
        """Per split: examples, and for token tasks the words scored and the words cut off by max_length."""
        out = {}
        for split, examples in self.examples.items():
            out[split] = {"examples": len(examples)}
            if self.data.token_level:
                out[split] |= {"words": sum(len(e.labels) for e in examples), "cut_words": self.cut_words[split]}
        return out
