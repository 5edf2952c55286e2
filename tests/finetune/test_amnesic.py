"""Amnesic probing's parts on the tiny random BERT, each checked against a computation of its own: the concept's word
vectors (one sentence at a time, no padding), the task metric and the masked-LM scores under an edit (the layers run
by hand, one input at a time), the first wordpiece of each word, and the controls' mean and std."""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch
from transformers import AutoTokenizer

from probing.analysis import ModelSettings
from probing.data.records import SkipCounter
from probing.data.sentences import Text
from probing.data.task_records import TaggedSentence, TaskData
from probing.data.word_tasks import ConlluWordTask
from probing.errors import ConfigError, DataFormatError, ModelLoadError
from probing.finetune.amnesic import concept_vectors, load_analysed, mean_of_pieces, summarized
from probing.finetune.amnesic_scores import Condition, first_wordpieces, masked_lm_scores, task_scores
from tests.helpers import FIXTURES
from tests.helpers.amnesic import exported_finetuned, saved_masked_lm
from tests.helpers.runs import fake_finetuned_model
from tests.helpers.stores import assert_one_line_error, cut_short

CPU = torch.device("cpu")
SENTENCES = [("she", "eats", "a", "healthy", "apple", "."), ("new", "york", "city", "rises"),
             ("the", "airheads", "eats", "infrequent", "juice"), ("stock", "is", "healthy")]
TAGS = ["PRON", "VERB", "DET", "ADJ", "NOUN", "PROPN", "PUNCT"]


def edit(states: torch.Tensor) -> torch.Tensor:
    return 0.5 * states.flip(-1) + 1.0


def by_hand(base, input_ids: torch.Tensor, layer: int, change, token_type_ids: torch.Tensor | None = None
            ) -> torch.Tensor:
    """The top hidden state of one unpadded input (1, T), hidden state `layer` changed by `change` (or not)."""
    states = base.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
    states = change(states) if change and layer == 0 else states
    for number, block in enumerate(base.encoder.layer, start=1):
        states = block(states)
        states = states[0] if isinstance(states, tuple) else states
        states = change(states) if change and layer == number else states
    return states


def test_the_mean_of_each_words_pieces_row_by_row_and_nan_for_a_word_without_any():
    states = torch.arange(24, dtype=torch.float32).reshape(2, 6, 2)  # [CLS] w0 w1a w1b [SEP] pad / [CLS] w0 [SEP]...
    pooled = mean_of_pieces(states, [[None, 0, 1, 1, None, None], [None, 0, None, None, None, None]], [3, 1])
    assert pooled[[0, 1, 3]].tolist() == [[2.0, 3.0], [5.0, 6.0], [14.0, 15.0]]
    assert pooled.shape == (4, 2) and pooled[2].isnan().all()


def test_first_wordpieces_of_words_and_of_a_pairs_second_text():
    assert first_wordpieces([None, 0, 1, 1, 2, None], [None, 0, 0, 0, 0, None]) == [1, 2, 4]
    assert first_wordpieces([None, 0, 1, None, 0, 0, None], [None, 0, 0, None, 1, 1, None]) == [1, 2, 4]


def test_the_controls_mean_and_sample_std_over_seeds():
    conditions = [Condition("none"), Condition("erased"), Condition("random", seed=0), Condition("random", seed=4)]
    scores = [{"accuracy": 0.9, "kl": 0.0}, {"accuracy": 0.5, "kl": 1.0}, {"accuracy": 0.8, "kl": 0.2},
              {"accuracy": 0.7, "kl": 0.4}]
    summary = summarized(scores, conditions)
    assert summary["none"] == scores[0] and summary["erased"] == scores[1]
    assert summary["random"]["per_seed"] == [{"seed": 0, "accuracy": 0.8, "kl": 0.2},
                                             {"seed": 4, "accuracy": 0.7, "kl": 0.4}]
    assert summary["random"]["mean"] == pytest.approx({"accuracy": 0.75, "kl": 0.3})
    assert summary["random"]["std"] == pytest.approx({"accuracy": math.sqrt(0.005), "kl": math.sqrt(0.02)})
    assert summarized(scores[:3], conditions[:3])["random"]["std"] == {"accuracy": None, "kl": None}


def test_concept_vectors_are_each_words_mean_at_the_layer_one_sentence_at_a_time(tiny_bert_path, tmp_path):
    model = load_analysed(ModelSettings("tiny", str(saved_masked_lm(tiny_bert_path, tmp_path / "mlm"))), CPU)
    concept = ConlluWordTask(column="deprel", paths=[str(FIXTURES / "data" / "conllu")]).load_word_task()
    split = concept.splits["train"]
    vectors, labels = concept_vectors(model, split, 1, 3, 64, CPU, "tiny")  # batches of 3, sorted by length
    expected = []
    for sentence, word in zip(split.sentence.tolist(), split.word.tolist()):  # a deprel example: its dependent
        encoded = model.tokenizer(list(split.sentences[sentence]), is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            states = model.encoder(**encoded, output_hidden_states=True).hidden_states[1][0]
        pieces = [position for position, owner in enumerate(encoded.word_ids()) if owner == word]
        expected.append(states[pieces].mean(dim=0))
    assert torch.allclose(vectors, torch.stack(expected), atol=1e-5)
    assert labels.tolist() == split.label.tolist()


def test_the_task_metric_under_an_edit_as_computed_by_hand(tiny_bert_path, tmp_path):
    folder = exported_finetuned(tiny_bert_path, tmp_path / "run" / "model", "pos", TAGS)
    model = load_analysed(ModelSettings("tiny", str(folder)), CPU)
    tags = [("PRON", "VERB", "DET", "ADJ", "NOUN", "PUNCT"), ("PROPN", "PROPN", "NOUN", "VERB"),
            ("DET", "NOUN", "VERB", "ADJ", "NOUN"), ("NOUN", "VERB", "ADJ")]
    data = TaskData("pos", TAGS, {"dev": [TaggedSentence(s, t) for s, t in zip(SENTENCES, tags)]}, [], SkipCounter())
    scores, counts = task_scores(model.finetuner, data, "dev", None, 1, [Condition("none"), Condition("erased", edit)],
                                 2, 64, CPU)
    assert counts == {"examples": 4, "words": 18, "cut_words": 0}
    for condition, change in zip(scores, (None, edit)):
        right = 0
        for sentence, gold in zip(SENTENCES, tags):
            encoded = model.tokenizer(list(sentence), is_split_into_words=True, return_tensors="pt")
            last_piece = {word: position for position, word in enumerate(encoded.word_ids()) if word is not None}
            with torch.no_grad():
                top = by_hand(model.encoder, encoded["input_ids"], 1, change)[0]
                predicted = model.finetuner.head(top[[last_piece[w] for w in range(len(sentence))]]).argmax(dim=-1)
            right += sum(TAGS[p] == g for p, g in zip(predicted.tolist(), gold))
        assert condition["accuracy"] == pytest.approx(right / 18)


def test_a_label_the_model_does_not_have_is_refused(tiny_bert_path, tmp_path):
    folder = exported_finetuned(tiny_bert_path, tmp_path / "run" / "model", "pos", TAGS[:2])
    model = load_analysed(ModelSettings("tiny", str(folder)), CPU)
    data = TaskData("pos", TAGS, {"dev": [TaggedSentence(("she", "eats", "a"), ("PRON", "VERB", "DET"))]}, [],
                    SkipCounter())
    with pytest.raises(ConfigError, match=r"the pos dev data has labels that the model was not fine-tuned on \(DET: "
                                          r"not among the 2 of its task.json\)"):
        task_scores(model.finetuner, data, "dev", None, 1, [Condition("none")], 2, 64, CPU)


@pytest.mark.parametrize("layer", [0, 2])
def test_masked_word_accuracy_and_kl_as_computed_by_hand(tiny_bert_path, tmp_path, layer):
    model = load_analysed(ModelSettings("tiny", str(saved_masked_lm(tiny_bert_path, tmp_path / "mlm"))), CPU)
    texts = [Text(words=words) for words in SENTENCES] + [Text(text="she eats", text_pair="a healthy apple")]
    scores, counts = masked_lm_scores(model.masked_lm, model.encoder, model.tokenizer, texts, layer,
                                      [Condition("none"), Condition("erased", edit)], 4, 64, CPU)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_path)
    right, divergences = [0, 0], []
    for text in texts:
        encoded = (tokenizer(list(text.words), is_split_into_words=True) if text.words
                   else tokenizer(text.text, text.text_pair))
        keys = list(zip(encoded.sequence_ids(), encoded.word_ids()))
        firsts = [p for p, key in enumerate(keys) if key[1] is not None and (p == 0 or keys[p - 1] != key)]
        for position in firsts:
            masked = torch.tensor([encoded["input_ids"]])
            masked[0, position] = tokenizer.mask_token_id
            with torch.no_grad():
                segments = torch.tensor([encoded["token_type_ids"]])
                plain, erased = (model.masked_lm.cls(by_hand(model.encoder, masked, layer, change, segments))
                                 [0, position].log_softmax(-1) for change in (None, edit))
            for index, log_probs in enumerate((plain, erased)):
                right[index] += int(log_probs.argmax()) == encoded["input_ids"][position]
            divergences.append(float((plain.exp() * (plain - erased)).sum()))
    words = len(divergences)
    assert counts == {"sentences": 5, "masked_words": words} and words == 18 + 5
    assert scores[0] == {"accuracy": pytest.approx(right[0] / words), "kl": 0.0}
    assert scores[1]["accuracy"] == pytest.approx(right[1] / words)
    assert scores[1]["kl"] == pytest.approx(statistics.fmean(divergences), rel=1e-4) and scores[1]["kl"] > 0


def test_a_model_without_a_masked_lm_head_or_task_json_is_refused(tiny_bert_path):
    with pytest.raises(ConfigError, match=r"model tiny has no masked-LM head \(its weights lack cls.predictions.bias.*"
                                          r"\), and is not a model exported by train.py \(no task.json\). Fix: "
                                          r"model.name_or_path=<train run>/model"):
        load_analysed(ModelSettings("tiny", str(tiny_bert_path)), CPU)


def test_an_export_without_its_task_head_is_refused_by_name(tiny_bert_path, tmp_path):
    folder = fake_finetuned_model(tiny_bert_path, tmp_path / "run" / "model", "pos")  # task.json, no head
    with pytest.raises(DataFormatError, match=r"run/model: it has task.json but no task_head.safetensors \(the task "
                                              r"head\). Fix: point model.name_or_path at a <train run>/model folder"):
        load_analysed(ModelSettings("tiny", str(folder)), CPU)


@pytest.fixture
def tagger(tiny_bert_path, tmp_path):
    return exported_finetuned(tiny_bert_path, tmp_path / "run" / "model", "pos", TAGS)


def rewritten_task(folder, change):
    about = json.loads((folder / "task.json").read_text())
    (folder / "task.json").write_text(json.dumps({**about, "labels": change(about["labels"])}))


def test_an_export_whose_task_json_was_edited_is_refused_before_it_scores_wrong_labels(tagger):
    rewritten_task(tagger, lambda labels: labels[1:] + labels[:1])  # the same labels, each head output misnamed
    with pytest.raises(ModelLoadError) as error:
        load_analysed(ModelSettings("tiny", str(tagger)), CPU)
    assert_one_line_error(error.value, f"{tagger / 'task.json'} is not the file that train.py exported")


def test_an_export_whose_weights_were_cut_short_is_refused(tagger):
    cut_short(tagger / "model.safetensors")
    with pytest.raises(ModelLoadError) as error:
        load_analysed(ModelSettings("tiny", str(tagger)), CPU)
    assert_one_line_error(error.value, f"{tagger / 'model.safetensors'} is not the file that train.py exported")


def older_export(folder):
    """An export as train.py wrote them before it recorded hashes."""
    (folder / "export.sha256").unlink()
    return folder


def test_an_older_export_loads_unchecked_with_a_warning(tagger, caplog):
    model = load_analysed(ModelSettings("tiny", str(older_export(tagger))), CPU)
    assert model.finetuner.labels == TAGS and model.objective == "pos"
    assert "recorded no hashes (export.sha256): changes to its files cannot be detected" in caplog.text


@pytest.mark.parametrize("damage, error_type, shown", [
    (lambda folder: rewritten_task(folder, lambda labels: labels[1:]), DataFormatError,
     "task_head.safetensors: its weights (bias (7,), weight (7, 32)) do not fit a head for the 6 labels of "
     "task.json on 32-dimensional vectors (bias (6,), weight (6, 32))"),
    (lambda folder: rewritten_task(folder, lambda labels: "PRON VERB"), DataFormatError,
     "task.json: its labels ('PRON VERB') are not a list of names"),
    (lambda folder: cut_short(folder / "task_head.safetensors"), DataFormatError,
     "task_head.safetensors: not a readable safetensors file (Error while deserializing header"),
    (lambda folder: cut_short(folder / "model.safetensors"), ModelLoadError,
     "model.safetensors is not readable (Error while deserializing header"),
], ids=["a label fewer than the head", "labels not a list", "head cut short", "weights cut short"])
def test_an_older_export_that_is_damaged_is_one_error_line(tagger, damage, error_type, shown):
    damage(older_export(tagger))
    with pytest.raises(error_type) as error:
        load_analysed(ModelSettings("tiny", str(tagger)), CPU)
    assert_one_line_error(error.value, str(tagger), shown)
