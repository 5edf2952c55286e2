"""What a model's output loses when one of its hidden states is edited (amnesic probing: probing.finetune.amnesic),
scored under each condition: no edit, the concept erased, each random control.

See docs/erasure.md, 'Amnesic probing', what is scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from probing.data.sentences import Text
from probing.data.task_records import TaggedSentence, TaskData, TextExample
from probing.erasure.hidden_state import Edit, edited_hidden_state
from probing.errors import ConfigError
from probing.finetune.datamodule import TaskDataModule
from probing.finetune.module import FineTuner


@dataclass(frozen=True)
class Condition:
    """One way of running the model: `name` none (no edit), erased (the concept's eraser) or random (a control,
    drawn with `seed`); `edit` (a fitted eraser) is applied to the hidden state."""

    name: str
    edit: Edit | None = None
    seed: int | None = None


def task_scores(finetuner: FineTuner, data: TaskData, split: str, max_sentences: int | None, layer: int,
                conditions: Sequence[Condition], batch_size: int, max_length: int, device: torch.device
                ) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """The task metrics of each condition on `split` of the task's data (its first `max_sentences` examples), and
    what was scored (examples; for token tasks the words scored and those cut off by `max_length`). The labels are
    the model's (task.json), in its head's order; a label of the data that the model does not have is refused.
    The examples are batched by length: no metric depends on their order."""
    examples = data.splits[split][:max_sentences]
    check_labels(examples, finetuner.labels, f"{data.name} {split}")
    scored = dataclasses.replace(data, labels=list(finetuner.labels), splits={split: examples})
    datamodule = TaskDataModule(scored, finetuner.tokenizer, max_length=max_length, batch_size=batch_size,
                                max_positions=finetuner.max_positions)
    datamodule.setup()
    by_length = sorted(datamodule.examples[split], key=lambda example: len(example.input_ids))  # less padding
    loader = DataLoader(by_length, batch_size=batch_size, collate_fn=datamodule.collate)
    by_condition = []
    for condition in conditions:
        with torch.inference_mode(), edited_hidden_state(finetuner.encoder, layer, condition.edit):
            for index, batch in enumerate(loader):
                finetuner.validation_step({key: value.to(device) for key, value in batch.items()}, index)
        by_condition.append({name: float(metric.compute()) for name, metric in finetuner.metrics.items()})
        for metric in finetuner.metrics.values():
            metric.reset()
    return by_condition, datamodule.summary()[split]


def check_labels(examples: Sequence[TaggedSentence | TextExample], labels: Sequence[str], data: str) -> None:
    """Refuse examples labelled with a label that the model's head does not have."""
    known = set(labels)
    unknown = sorted({tag for example in examples
                      for tag in (example.tags if isinstance(example, TaggedSentence) else (example.label,))} - known)
    if unknown:
        raise ConfigError(f"analysis.sentences: the {data} data has labels that the model was not fine-tuned on "
                          f"({', '.join(unknown[:5])}: not among the {len(labels)} of its task.json). Fix: score the "
                          "model on the data it was fine-tuned on (analysis.sentences as train.py's data.source)")


@dataclass(frozen=True)
class MaskedWord:
    """One input of the masked-LM scoring: a sentence with one word's first wordpiece masked."""

    input_ids: list[int]
    type_ids: list[int]
    position: int  # of the mask
    target: int    # the wordpiece it replaced


def masked_lm_scores(masked_lm: PreTrainedModel, encoder: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                     texts: Sequence[Text], layer: int, conditions: Sequence[Condition], batch_size: int,
                     max_length: int, device: torch.device) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """Masked-word accuracy and KL divergence from the unedited model (the first condition, which must edit
    nothing) of each condition, over every word of `texts` masked in turn; and how many sentences and words.
    `encoder` is the masked LM's base model, where the hidden state `layer` is edited."""
    if conditions[0].edit is not None:
        raise ValueError("the first condition is the reference of the KL divergence and must edit nothing")
    limit = min(max_length, getattr(masked_lm.config, "max_position_embeddings", max_length))
    correct, divergence, words = [0] * len(conditions), [0.0] * len(conditions), 0
    for batch in batched(masked_words(tokenizer, texts, limit), batch_size):
        inputs = collated(batch, tokenizer, device)
        targets = torch.tensor([word.target for word in batch], device=device)
        reference = None
        for index, condition in enumerate(conditions):
            log_probs = masked_log_probs(masked_lm, encoder, layer, condition, inputs, batch)
            reference = log_probs if reference is None else reference
            correct[index] += int((log_probs.argmax(dim=-1) == targets).sum())
            divergence[index] += float(F.kl_div(log_probs, reference, log_target=True, reduction="sum"))
        words += len(batch)
    if not words:
        raise ValueError("no word to mask in the sentences")
    return ([{"accuracy": right / words, "kl": kl / words} for right, kl in zip(correct, divergence)],
            {"sentences": len(texts), "masked_words": words})


def masked_log_probs(masked_lm: PreTrainedModel, encoder: PreTrainedModel, layer: int, condition: Condition,
                     inputs: dict[str, Tensor], batch: Sequence[MaskedWord]) -> Tensor:
    """(B, vocabulary) log-probabilities at each input's mask, hidden state `layer` edited by the condition."""
    positions = torch.tensor([word.position for word in batch], device=inputs["input_ids"].device)
    with torch.inference_mode(), edited_hidden_state(encoder, layer, condition.edit):
        logits = masked_lm(**inputs, output_hidden_states=False).logits
    return logits[torch.arange(len(batch), device=positions.device), positions].float().log_softmax(dim=-1)


def masked_words(tokenizer: PreTrainedTokenizerFast, texts: Iterable[Text], max_length: int) -> Iterator[MaskedWord]:
    """Every word of every text (cut at `max_length` wordpieces) with its first wordpiece masked, in order."""
    for text in texts:
        encoding = encoded(tokenizer, text, max_length)
        for position in first_wordpieces(encoding.word_ids, encoding.sequence_ids):
            input_ids = list(encoding.ids)
            input_ids[position] = tokenizer.mask_token_id
            yield MaskedWord(input_ids, list(encoding.type_ids), position, encoding.ids[position])


def encoded(tokenizer: PreTrainedTokenizerFast, text: Text, max_length: int):
    """The fast tokenizer's encoding of a text: pre-split words, or a text (pair), with the special tokens."""
    if text.words:
        batch = tokenizer(list(text.words), is_split_into_words=True, truncation=True, max_length=max_length)
    else:
        batch = tokenizer(text.text, text.text_pair, truncation=True, max_length=max_length)
    return batch.encodings[0]


def first_wordpieces(word_ids: Sequence[int | None], sequence_ids: Sequence[int | None]) -> list[int]:
    """The position of each word's first wordpiece (a word of a pair's second text is another word)."""
    firsts, previous = [], None
    for position, word in enumerate(zip(sequence_ids, word_ids)):
        if word[1] is not None and word != previous:
            firsts.append(position)
        previous = word
    return firsts


def collated(batch: Sequence[MaskedWord], tokenizer: PreTrainedTokenizerFast, device: torch.device
              ) -> dict[str, Tensor]:
    """The model's inputs, padded; segment ids only for a model that takes them (not DistilBERT)."""
    def padded(rows: Iterable[list[int]], value: int) -> Tensor:
        return pad_sequence([torch.tensor(row, dtype=torch.long) for row in rows], batch_first=True,
                            padding_value=value).to(device)

    inputs = {"input_ids": padded((word.input_ids for word in batch), tokenizer.pad_token_id),
              "attention_mask": padded(([1] * len(word.input_ids) for word in batch), 0)}
    if "token_type_ids" in tokenizer.model_input_names:
        inputs["token_type_ids"] = padded((word.type_ids for word in batch), 0)
    return inputs


def batched(items: Iterable[MaskedWord], size: int) -> Iterator[list[MaskedWord]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
