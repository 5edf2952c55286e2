"""The FineTuner on the tiny random BERT: what it classifies, its losses, the attention window, and its export."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from transformers import AutoModel

from probing.data.files import file_mode
from probing.data.records import SkipCounter
from probing.data.task_records import TaggedSentence, TaskData
from probing.errors import ConfigError, ProbingError
from probing.finetune.checkpoints import load_checkpoint_weights, record_hash
from probing.finetune.datamodule import TaskDataModule
from probing.finetune.export import export_model
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


def test_the_attention_policy_reaches_the_mask_and_a_wide_positional_window_is_full_attention(tiny_bert_path):
    """positional k = 1000 gives the logits of no window exactly; blocked and sink other logits; the policy in
    force is recorded only with a window; a bad policy is refused before the model is loaded."""
    outputs = {}
    for window, policy in ((None, "positional"), (1000, "positional"), (1000, "blocked"), (1000, "sink")):
        torch.manual_seed(0)
        module = FineTuner(str(tiny_bert_path), TAGS, "token", attention_window=window, attention_policy=policy)
        outputs[window, policy] = module.eval()(batch_of(module))[0]
        assert module.window_policy == (None if window is None else policy)
    assert torch.equal(outputs[1000, "positional"], outputs[None, "positional"])
    for policy in ("blocked", "sink"):
        assert not torch.equal(outputs[1000, policy], outputs[None, "positional"])
    assert FineTuner(str(tiny_bert_path), TAGS, "token", attention_window=2).attention_policy == "sink"
    with pytest.raises(ConfigError, match=r"^attention_policy='Sink' is not an attention policy\. Fix: "):
        FineTuner("/nonexistent/model", TAGS, "token", attention_window=2, attention_policy="Sink")


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
    assert json.loads((folder / "task.json").read_text()) == {"task": "pos", "kind": "token", "labels": TAGS,
                                                              "metric": tagger.hparams.metric}
    assert {path.name: path.stat().st_mode & 0o777 for path in folder.iterdir()} == {
        path.name: file_mode() for path in folder.iterdir()}  # safetensors alone writes 0600
    hashes = dict(reversed(line.split("  ")) for line in (folder / "export.sha256").read_text().splitlines())
    assert hashes == {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in folder.iterdir()
                      if path.name != "export.sha256"}  # every other file, in sha256sum's format


def test_checkpoint_weights_load_with_weights_only(tagger, tiny_bert_path, tmp_path):
    path = tmp_path / "best.ckpt"
    torch.save({"state_dict": tagger.state_dict(), "epoch": 3}, path)
    record_hash(path)
    torch.manual_seed(1)
    other = FineTuner(str(tiny_bert_path), TAGS, "token")
    assert not torch.equal(other.head.weight, tagger.head.weight)
    assert load_checkpoint_weights(other, path) == 3
    assert torch.equal(other.head.weight, tagger.head.weight)


def test_an_interrupted_export_leaves_the_previous_model_whole(tagger, tmp_path, monkeypatch):
    folder = export_model(tagger, tmp_path / "model", "pos")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # stopped after the encoder's weights, before the tokenizer and task.json

    monkeypatch.setattr(type(tagger.tokenizer), "save_pretrained", killed)
    with pytest.raises(KeyboardInterrupt):
        export_model(tagger, folder, "ner")
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    with pytest.raises(KeyboardInterrupt):
        export_model(tagger, tmp_path / "first" / "model", "pos")
    assert not (tmp_path / "first" / "model").exists()  # no half-written folder for probe.py to load
    monkeypatch.undo()
    export_model(tagger, folder, "ner")
    assert json.loads((folder / "task.json").read_text())["task"] == "ner"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["first", "model"]  # nothing left over


@pytest.mark.parametrize("arguments,message", [
    ({"isotropy_reg": float("nan")}, "isotropy_reg=nan is not a number in [0, inf)"),
    ({"isotropy_reg": float("inf")}, "isotropy_reg=inf is not a number in [0, inf)"),
    ({"isotropy_reg": "0.1"}, "isotropy_reg='0.1'"),
    ({"isotropy_on_context": "yes"}, "isotropy_on_context must be true or false"),
    ({"dropout": 1.0}, "dropout=1.0 is not a number in [0, 1)"),
    ({"kind": "word"}, "kind='word' is not a kind of task"),
    ({"kind": "sentence", "attention_window": 2}, "attention_window=2 restricts attention to nearby words"),
    ({"attention_window": -1}, "attention_window=-1 is not an attention window"),
    ({"attention_window": 2, "attention_policy": "none"}, "attention_policy='none' is not an attention"),
])
def test_bad_arguments_are_refused_before_the_encoder_loads(arguments, message):
    """Built in Python, the FineTuner names its arguments; built by train.py, the keys (tests/tasks/test_train.py)."""
    arguments = {"name_or_path": "/nowhere", "labels": TAGS, "kind": "token", **arguments}
    with pytest.raises(ConfigError, match="Fix:") as error:
        FineTuner(**arguments)
    assert str(error.value).startswith(message)


def test_a_loss_that_is_not_finite_names_the_learning_rate_setting(tagger):
    with torch.no_grad():
        tagger.head.weight.fill_(float("nan"))
    tagger.log = lambda *args, **kwargs: None
    with pytest.raises(ProbingError, match=r"Fix: lower finetune\.module\.optimizer\.lr"):
        tagger.training_step(batch_of(tagger), 0)
