"""The FineTuner on the tiny random BERT: what it classifies, its losses, the attention window, and its export."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel

from probing.data.records import SkipCounter
from probing.data.tasks import TaggedSentence, TaskData
from probing.finetune.datamodule import TaskDataModule
from probing.finetune.export import export_model, load_checkpoint_weights
from probing.finetune.isotropy import mean_pairwise_cosine
from probing.finetune.module import FineTuner

TAGS = ["DT", "NN", "PRP", "VBZ"]
SENTENCES = [TaggedSentence(("she", "eats", "the", "apple", "juice", "in", "new", "york", "city"),
                            ("PRP", "VBZ", "DT", "NN", "NN", "DT", "NN", "NN", "NN"), "toy:1"),
             TaggedSentence(("the", "stock", "rises"), ("DT", "NN", "VBZ"), "toy:2")]


def batch_of(module: FineTuner, sentences=SENTENCES) -> dict[str, torch.Tensor]:
    data = TaskData("pos", TAGS, {"train": list(sentences), "dev": list(sentences)}, [], SkipCounter())
    datamodule = TaskDataModule(data, module.tokenizer)
    datamodule.setup()
    return datamodule.collate(datamodule.examples["train"])


@pytest.fixture
def tagger(tiny_bert_path):
    torch.manual_seed(0)
    return FineTuner(str(tiny_bert_path), TAGS, "token").eval()


def test_token_tasks_classify_each_word_from_its_last_wordpiece(tagger):
    batch = batch_of(tagger)
    logits, vectors = tagger(batch)
    assert logits.shape == (2, 9, len(TAGS)) and vectors.shape == (2, 9, 32)
    top = tagger.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    assert torch.allclose(vectors[1, 2], top[1, batch["last_piece"][1, 2]])  # "rises": its only piece
    assert torch.allclose(logits[0, 3], tagger.head(top[0, batch["last_piece"][0, 3]]))


def test_sentence_tasks_classify_the_first_token(tiny_bert_path):
    module = FineTuner(str(tiny_bert_path), ["0", "1"], "sentence").eval()
    batch = {key: value for key, value in batch_of(module).items() if key != "last_piece"}
    logits, vectors = module(batch)
    top = module.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    assert logits.shape == (2, 2) and torch.allclose(vectors, top[:, 0])


def test_the_isotropy_penalty_joins_the_loss_with_its_weight(tiny_bert_path):
    torch.manual_seed(0)
    plain = FineTuner(str(tiny_bert_path), TAGS, "token").eval()  # eval: no dropout, the same task loss
    torch.manual_seed(0)
    regularised = FineTuner(str(tiny_bert_path), TAGS, "token", isotropy_reg=0.5).eval()
    batch = batch_of(plain)
    regularised.log = plain.log = lambda *args, **kwargs: None
    embeddings = regularised.encoder.get_input_embeddings().weight
    difference = regularised.training_step(batch, 0) - plain.training_step(batch, 0)
    assert float(difference.detach()) == pytest.approx(0.5 * float(mean_pairwise_cosine(embeddings.detach())), rel=1e-4)


def test_an_attention_window_hides_words_beyond_it(tiny_bert_path):
    near = [TaggedSentence(("she", "eats", "the", "apple", "juice"), ("PRP", "VBZ", "DT", "NN", "NN"), "toy:1")]
    far = [TaggedSentence(("she", "eats", "the", "apple", "oak"), ("PRP", "VBZ", "DT", "NN", "NN"), "toy:1")]
    for window, should_change in ((1, False), (None, True)):
        torch.manual_seed(0)
        module = FineTuner(str(tiny_bert_path), TAGS, "token", attention_window=window).eval()
        first = module(batch_of(module, near))[0][0, 0]
        second = module(batch_of(module, far))[0][0, 0]  # "oak" is 4 words from "she"; 2 layers see 2 words
        assert torch.allclose(first, second, atol=1e-6) != should_change


def test_the_export_loads_as_a_plain_encoder_with_the_trained_weights(tagger, tmp_path):
    with torch.no_grad():
        tagger.encoder.get_input_embeddings().weight.add_(1.0)  # "trained": differs from the original weights
    folder = export_model(tagger, tmp_path / "model", "pos")
    reloaded = AutoModel.from_pretrained(folder).eval()
    batch = batch_of(tagger)
    ours = tagger.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    theirs = reloaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert json.loads((folder / "task.json").read_text()) == {"task": "pos", "kind": "token", "labels": TAGS}


def test_checkpoint_weights_load_with_weights_only(tagger, tiny_bert_path, tmp_path):
    path = tmp_path / "best.ckpt"
    torch.save({"state_dict": tagger.state_dict(), "epoch": 3}, path)
    torch.manual_seed(1)
    other = FineTuner(str(tiny_bert_path), TAGS, "token")
    assert not torch.equal(other.head.weight, tagger.head.weight)
    load_checkpoint_weights(other, path)
    assert torch.equal(other.head.weight, tagger.head.weight)
