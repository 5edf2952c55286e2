"""Tokenised batches of a fine-tuning task (probing.data.task_records.TaskData) for the FineTuner.

See docs/finetuning.md, 'Defaults' and 'Checkpoints and resuming' under 'What it does'.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import lightning as L
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, DistributedSampler

from probing.data.settings import require_int
from probing.data.task_records import TaggedSentence, TaskData, TextExample
from probing.errors import ConfigError, setting
from probing.features.attention import PADDING, SPECIAL
from probing.finetune.metrics import IGNORE

log = logging.getLogger(__name__)


def load_task_data(source, task: str) -> TaskData:
    """The data that `source` (a built `data.source`) reads, which must be the data of `task`."""
    data = source.load()
    if data.name != task:
        raise ConfigError(f"data.source reads {data.name} data, but task={task}. Fix: keep the data of the "
                          f"task config (task={data.name}), or point data.source at {task} data")
    if data.skips.total():
        log.warning("%s: skipped while reading: %s", data.name, data.skips.summary())
    return data


def usable_max_length(requested: int, tokenizer, max_positions: int | None = None) -> int:
    """The task's `max_length`, or the model's own limit on positions where that is smaller (with a warning)."""
    require_int(setting("max_length"), requested, minimum=3)
    usable = min(requested, tokenizer.model_max_length, max_positions or requested)
    if usable < requested:
        log.warning("the task's max_length=%d is more than %s takes; using %d", requested, tokenizer.name_or_path,
                    usable)
    return usable


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
        words = [SPECIAL if word is None else word for word in encoding.word_ids]
        last_piece = {word: position for position, word in enumerate(words) if word != SPECIAL}
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
    return [Encoded(list(encoding.ids), [SPECIAL if word is None else word for word in encoding.word_ids],
                    label_ids[text.label]) for text, encoding in zip(texts, encodings)]


class EpochOrder(DistributedSampler):
    """This process's share of a permutation of the examples drawn from (seed, epoch) alone (DistributedSampler's
    shuffle, also with one process), skipping its first `start` indices (set by ResumableLoader on a resume)."""

    def __init__(self, examples: Sequence, seed: int, num_replicas: int = 1, rank: int = 0):
        super().__init__(examples, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self.start = 0

    def __iter__(self):
        return iter(list(super().__iter__())[self.start:])


class ResumableLoader(DataLoader):
    """The train loader, stateful for Lightning: `state_dict()` (saved in each checkpoint) is the epoch and the number
    of batches handed out in it; after `load_state_dict()`, the next pass over that same epoch starts after them.
    Its own generator seeds it, so that iterating draws nothing from torch's global generator (dropout's)."""

    def __init__(self, examples: Sequence, batch_size: int, order: EpochOrder, collate_fn, seed: int):
        super().__init__(examples, batch_size=batch_size, sampler=order, collate_fn=collate_fn,
                         generator=torch.Generator().manual_seed(seed))
        self.position = {"epoch": 0, "batches": 0}
        self.resumed: dict[str, int] | None = None

    def state_dict(self) -> dict[str, int]:
        return dict(self.position)

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.resumed = {"epoch": int(state_dict["epoch"]), "batches": int(state_dict["batches"])}

    def __iter__(self):
        return self._batches()

    def _batches(self):
        """A generator: its body runs at the first batch, after Lightning has set the sampler's epoch."""
        epoch, resumed, self.resumed = self.sampler.epoch, self.resumed, None
        skipped = resumed["batches"] if resumed is not None and resumed["epoch"] == epoch else 0
        self.sampler.start = skipped * self.batch_size
        self.position = {"epoch": epoch, "batches": skipped}
        for batch in super().__iter__():
            self.position["batches"] += 1
            yield batch


class TaskDataModule(L.LightningDataModule):
    """Train and dev batches of one task (dev is Lightning's validation set), padded per batch. `max_length` is cut
    to what the model takes: its tokenizer's limit and `max_positions` (the encoder's, FineTuner.max_positions)."""

    def __init__(self, data: TaskData, tokenizer, max_length: int = 128, batch_size: int = 32,
                 eval_batch_size: int | None = None, seed: int = 0, max_positions: int | None = None):
        super().__init__()
        self.max_length = usable_max_length(max_length, tokenizer, max_positions)
        self.batch_size = require_int(setting("batch_size"), batch_size, minimum=1)
        self.data, self.tokenizer, self.eval_batch_size = data, tokenizer, eval_batch_size or batch_size
        self.seed = seed
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
            raise ConfigError(f"{setting('batch_size')}={batch_size} is the global batch and must divide evenly over "
                              f"{world} processes. Fix: a multiple of {world}")
        return batch_size // world

    def train_dataloader(self) -> ResumableLoader:
        examples = self.examples["train"]
        world, rank = (self.trainer.world_size, self.trainer.global_rank) if self.trainer is not None else (1, 0)
        order = EpochOrder(examples, self.seed, num_replicas=world, rank=rank)
        return ResumableLoader(examples, self.per_device(self.batch_size), order, self.collate, self.seed)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.examples["dev"], batch_size=self.per_device(self.eval_batch_size),
                          collate_fn=self.collate, generator=torch.Generator().manual_seed(self.seed))

    def collate(self, examples: list[Encoded]) -> dict[str, torch.Tensor]:
        def padded(rows, value):
            return pad_sequence([torch.tensor(row, dtype=torch.long) for row in rows], batch_first=True,
                                padding_value=value)

        batch = {"input_ids": padded([e.input_ids for e in examples], self.tokenizer.pad_token_id),
                 "attention_mask": padded([[1] * len(e.input_ids) for e in examples], 0),
                 "word_ids": padded([e.word_ids for e in examples], PADDING)}
        if self.data.token_level:
            batch["labels"] = padded([e.labels for e in examples], IGNORE)
            batch["last_piece"] = padded([e.last_piece for e in examples], PADDING)
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
