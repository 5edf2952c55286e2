"""Tokenised fine-tuning batches, checked by hand on the tiny WordPiece vocabulary of the tests."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from probing.data.records import SkipCounter
from probing.data.task_records import TaggedSentence, TaskData, TextExample
from probing.errors import ConfigError
from probing.features.attention import PADDING, SPECIAL
from probing.finetune.datamodule import TaskDataModule, load_task_data, whole_words_within
from probing.finetune.metrics import IGNORE

TAGS = ["DT", "NN", "PRP", "VBZ"]


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_path):
    return AutoTokenizer.from_pretrained(tiny_bert_path)


def pos_data(*sentences: TaggedSentence) -> TaskData:
    return TaskData("pos", TAGS, {"train": list(sentences), "dev": list(sentences[:1])}, [], SkipCounter())


SHE = TaggedSentence(("she", "eats", "airheads"), ("PRP", "VBZ", "NN"), "toy:1")
APPLE = TaggedSentence(("the", "apple"), ("DT", "NN"), "toy:2")


def test_each_word_is_scored_at_its_last_wordpiece(tokenizer):
    module = TaskDataModule(pos_data(SHE, APPLE), tokenizer, batch_size=2)
    module.setup()
    batch = module.collate(module.examples["train"])
    # [CLS] she eats air ##head ##s [SEP]   /   [CLS] the apple [SEP] + 3 padding
    assert tokenizer.convert_ids_to_tokens(batch["input_ids"][0]) == [
        "[CLS]", "she", "eats", "air", "##head", "##s", "[SEP]"]
    assert batch["last_piece"].tolist() == [[1, 2, 5], [1, 2, PADDING]]
    assert batch["labels"].tolist() == [[2, 3, 1], [0, 1, IGNORE]]
    s, p = SPECIAL, PADDING
    assert batch["word_ids"].tolist() == [[s, 0, 1, 2, 2, 2, s], [s, 0, 1, s, p, p, p]]
    assert batch["attention_mask"].tolist() == [[1] * 7, [1, 1, 1, 1, 0, 0, 0]]


def test_max_length_keeps_whole_words_and_counts_the_rest(tokenizer):
    module = TaskDataModule(pos_data(SHE), tokenizer, max_length=5)  # room for 3 pieces: "airheads" has 3 itself
    module.setup()
    [example] = module.examples["train"]
    assert tokenizer.convert_ids_to_tokens(example.input_ids) == ["[CLS]", "she", "eats", "[SEP]"]
    assert example.labels == [2, 3] and module.summary()["train"] == {"examples": 1, "words": 2, "cut_words": 1}


@pytest.mark.parametrize("word_ids,budget,keep", [
    ([0, 1, 2, 2, 2], 5, 5), ([0, 1, 2, 2, 2], 4, 2), ([0, 1, 2, 2, 2], 3, 2), ([0, 0, 1], 1, 0), ([0, 1], 1, 1)])
def test_whole_words_within_a_budget(word_ids, budget, keep):
    assert whole_words_within(word_ids, budget) == keep


def test_sentence_pairs_keep_their_label(tokenizer):
    data = TaskData("mrpc", ["0", "1"], {"train": [TextExample("the apple", "1", "an apple", "toy:1")],
                                         "dev": [TextExample("she eats", "0", None, "toy:2")]}, [], SkipCounter())
    module = TaskDataModule(data, tokenizer)
    module.setup()
    batch = module.collate(module.examples["train"])
    assert tokenizer.convert_ids_to_tokens(batch["input_ids"][0]) == [
        "[CLS]", "the", "apple", "[SEP]", "[UNK]", "apple", "[SEP]"]  # "an" is not in the tiny vocabulary
    assert batch["labels"].tolist() == [1] and "last_piece" not in batch


def test_the_batch_size_is_global_over_processes(tokenizer):
    module = TaskDataModule(pos_data(SHE, APPLE), tokenizer, batch_size=6)
    module.trainer = type("FakeTrainer", (), {"world_size": 2})()
    assert module.per_device(6) == 3
    module.trainer = type("FakeTrainer", (), {"world_size": 4})()
    with pytest.raises(ConfigError, match="^batch_size=6 is the global batch and must divide evenly over 4 processes"):
        module.per_device(6)


@pytest.mark.parametrize("settings,message", [
    ({"batch_size": 0}, "batch_size=0 is not an integer >= 1"),
    ({"batch_size": "16"}, "batch_size='16' is not an integer"),
    ({"max_length": 2}, "max_length=2 is not an integer >= 3"),
])
def test_bad_settings_are_refused_naming_their_argument(tokenizer, settings, message):
    with pytest.raises(ConfigError, match="Fix:") as error:
        TaskDataModule(pos_data(SHE), tokenizer, **settings)
    assert message in str(error.value)


def test_max_length_is_cut_to_what_the_model_takes(tokenizer, caplog):
    module = TaskDataModule(pos_data(SHE), tokenizer, max_length=128, max_positions=64)
    assert module.max_length == 64 and "the task's max_length=128 is more than" in caplog.text
    assert TaskDataModule(pos_data(SHE), tokenizer, max_length=32, max_positions=64).max_length == 32


def test_data_of_another_task_is_refused():
    source = type("Source", (), {"load": lambda self: pos_data(SHE)})()
    assert load_task_data(source, "pos").name == "pos"
    with pytest.raises(ConfigError, match="data.source reads pos data, but task=ner. Fix:"):
        load_task_data(source, "ner")


def sentence_ids(batches) -> list[list[int]]:
    return [batch["input_ids"][:, 1].tolist() for batch in batches]  # each sentence's first word tells it apart


def test_the_train_order_depends_on_seed_and_epoch_only_and_resumes_mid_epoch(tokenizer):
    words = ["she", "apple", "juice", "stock", "city", "oak", "pine", "larch", "word", "party"]
    data = pos_data(*(TaggedSentence((word,), ("NN",), f"toy:{i}") for i, word in enumerate(words)))
    module = TaskDataModule(data, tokenizer, batch_size=3, seed=7)
    module.setup()
    loader = module.train_dataloader()
    loader.sampler.set_epoch(1)  # as Lightning does at each epoch's start
    torch.manual_seed(0)
    whole_epoch = sentence_ids(loader)
    torch.manual_seed(1)  # the global generator (dropout's) plays no part
    assert sentence_ids(loader) == whole_epoch and sorted(sum(whole_epoch, [])) == sorted(
        tokenizer.convert_tokens_to_ids(words))
    loader.sampler.set_epoch(2)
    assert sentence_ids(loader) != whole_epoch
    loader.sampler.set_epoch(1)
    batches = iter(loader)
    first_two = sentence_ids([next(batches), next(batches)])
    state = loader.state_dict()  # what a checkpoint taken now holds
    assert state == {"epoch": 1, "batches": 2} and first_two == whole_epoch[:2]
    resumed = TaskDataModule(data, tokenizer, batch_size=3, seed=7)
    resumed.setup()
    resumed_loader = resumed.train_dataloader()
    resumed_loader.load_state_dict(state)
    resumed_loader.sampler.set_epoch(1)
    assert sentence_ids(resumed_loader) == whole_epoch[2:]
    assert resumed_loader.state_dict() == {"epoch": 1, "batches": 4}
    resumed_loader.sampler.set_epoch(2)  # the next epoch is whole again
    assert len(sentence_ids(resumed_loader)) == 4
