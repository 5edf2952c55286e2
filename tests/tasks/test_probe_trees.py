"""probe.py task=tree_distance and task=tree_depth as a user runs them (Hewitt & Manning 2019's structural probes on
the bundled UD sample, a tiny random BERT): the results contract, the LINEAR baseline on the same sentences, the
refusals, and a treebank that is no tree as one `error:` line."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest

from probing.cli import probing_cause
from probing.data.records import WordInContext
from probing.errors import ProbingError
from probing.features.encoder import WordEncoder
from probing.features.store import FeatureStore
from probing.tasks import probe
from tests.helpers import REPO, run_script
from tests.helpers.runs import compose_job, probe_in_process, tiny_model

BUNDLED = REPO / "probing" / "resources" / "ud_english_ewt"
# The LINEAR baseline on the bundled sample's test split (189 sentences; each word attached to the next), as the
# reference's own functions score it: UUAS 2028 gold edges; Root % of the 186 sentences with a word that is not
# punctuation (the reference counts the other three, "?" and "???", too: 59 / 189).
LINEAR_TEST = {"uuas": 0.42209, "dspr": 0.55561, "root_acc": 56 / 186, "nspr": 0.29498}


@pytest.fixture
def tiny(tiny_bert_path):
    return tiny_model(tiny_bert_path)



def test_the_distance_probe_records_its_scores_the_linear_baseline_and_example_trees(tmp_path, tiny):
    results = probe_in_process(tmp_path, "distance", "task=tree_distance", "layer=1", "trainer.max_epochs=2", *tiny)
    assert (results["task"], results["kind"], results["structure"], results["probe_family"]) == (
        "tree_distance", "tree_probe", "distance", "linear")
    assert results["rank"] == 32 and results["data_summary"]["test"]["sentences"] == 189  # full rank: D
    for split in ("dev", "test"):
        block = results[split]
        assert block["selectivity_uuas"] == pytest.approx(block["uuas"] - block["control_uuas"])
        assert block["selectivity_dspr"] == pytest.approx(block["dspr"] - block["control_dspr"])
    linear = results["linear_baseline"]["test"]
    assert (linear["uuas"], linear["dspr"]) == (pytest.approx(LINEAR_TEST["uuas"], abs=1e-5),
                                                pytest.approx(LINEAR_TEST["dspr"], abs=1e-5))
    assert linear["uuas_edges"] == results["test"]["uuas_edges"] == 2028
    example = results["examples"][0]
    assert len(example["gold_edges"]) == len(example["predicted_edges"]) == sum(not p for p in
                                                                                 example["punctuation"]) - 1


def test_the_depth_probe_scores_the_root_and_the_depths(tmp_path, tiny):
    results = probe_in_process(tmp_path, "depth", "task=tree_depth", "layer=2", "probe.rank=4",
                             "trainer.max_epochs=2", *tiny)
    assert results["structure"] == "depth" and results["rank"] == 4 and 0 <= results["test"]["root_acc"] <= 1
    linear = results["linear_baseline"]["test"]
    assert linear["root_sentences"] == results["test"]["root_sentences"] == 186
    assert (linear["root_acc"], linear["nspr"]) == (pytest.approx(LINEAR_TEST["root_acc"], abs=1e-5),
                                                    pytest.approx(LINEAR_TEST["nspr"], abs=1e-5))
    assert len(results["examples"][0]["gold_depths"]) == len(results["examples"][0]["words"])


def test_scores_undefined_on_the_test_sentences_are_null_with_a_warning(tmp_path, tiny, caplog):
    """A test split of one-word sentences and of punctuation alone: no gold edge for UUAS, no length of 5 to 50 for
    DSpr.; null in a strict results.json (the LINEAR baseline's too), and why in the log and the results."""
    bank = tmp_path / "bank"
    bank.mkdir()
    for split in ("train", "dev"):
        shutil.copy(BUNDLED / f"en_ewt-sample-{split}.conllu", bank / f"x-{split}.conllu")
    word, mark = "1\tHello\thello\tINTJ\tUH\t_\t0\troot\t_\t_\n\n", "1\t.\t.\tPUNCT\t.\t_\t0\troot\t_\t_\n\n"
    (bank / "x-test.conllu").write_text(word * 3 + mark * 2, encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        results = probe_in_process(tmp_path, "words", "task=tree_distance", f"data.data_dir={bank}", "layer=1",
                                   "trainer.max_epochs=1", *tiny)
    written = (tmp_path / "words" / "run" / "results.json").read_text()
    json.loads(written, parse_constant=lambda token: pytest.fail(f"{token} in results.json"))
    test = results["test"]
    assert (test["sentences"], test["uuas_edges"]) == (5, 0)
    assert {key: test[key] for key in ("uuas", "dspr", "control_uuas", "selectivity_uuas", "selectivity_dspr")} == (
        dict.fromkeys(("uuas", "dspr", "control_uuas", "selectivity_uuas", "selectivity_dspr")))
    assert results["linear_baseline"]["test"]["uuas"] is None and results["dev"]["uuas"] is not None
    why = {"uuas": "no sentence has two words that are not punctuation: no gold edge to find",
           "dspr": "no sentence of 5 to 50 words (the lengths it averages over) has a defined correlation"}
    for name, key in (("uuas", "uuas"), ("dspr", "dspr"), ("control_uuas", "uuas")):
        warning = f"test {name} is undefined ({why[key]}): recorded as null"
        assert warning in results["warnings"] and warning in caplog.text


def test_a_sentence_longer_than_the_encoders_window_is_scored_each_word_in_a_window_centred_on_it(tmp_path, tiny,
                                                                                                tiny_bert_path):
    """A test sentence of 100 words (102 wordpieces with [CLS] and [SEP]) and features.max_length=16: kept and scored
    whole (no word skipped, no sentence left out, its 99 gold edges counted), each word's vector that of the 16
    wordpieces centred on it, as docs/structural.md says."""
    words = ["the", "new", "york", "city", "is", "healthy", "and", "she", "eats", "apple", "juice", "in", "air"] * 8
    words = words[:100]
    bank = tmp_path / "bank"
    bank.mkdir()
    for split in ("train", "dev"):
        shutil.copy(BUNDLED / f"en_ewt-sample-{split}.conllu", bank / f"x-{split}.conllu")
    chain = "".join(f"{i + 1}\t{word}\t{word}\tX\tNN\t_\t{(i + 2) % 101}\tdep\t_\t_\n" for i, word in enumerate(words))
    (bank / "x-test.conllu").write_text(chain + "\n", encoding="utf-8")
    results = probe_in_process(tmp_path, "long", "task=tree_distance", f"data.data_dir={bank}", "layer=1",
                               "features.max_length=16", "trainer.max_epochs=1", *tiny)
    assert results["data_summary"]["test"] == {"sentences": 1, "words": 100, "dropped_sentences": 0}
    assert results["extraction_skipped_rows"]["test"] == 0
    assert (results["test"]["sentences"], results["test"]["uuas_edges"]) == (1, 99)
    encoder = WordEncoder(str(tiny_bert_path), max_length=16)
    with FeatureStore(results["stores"]["test"]) as store:
        stored = store.read_layer(1)
    for word in (0, 50, 99):  # at the start, in the middle, at the end: 14 words around it, inside the sentence
        start = min(max(0, word - 6), len(words) - 14)
        [window] = encoder.prepare_many([WordInContext(tuple(words), (word,), words[word], "word")])
        assert window.input_ids == encoder.tokenizer.convert_tokens_to_ids(["[CLS]", *words[start:start + 14], "[SEP]"])
        expected = encoder.encode([window])[0, 1].numpy()
        np.testing.assert_allclose(stored[word], expected, rtol=2e-3, atol=2e-3)  # stored as float16


@pytest.mark.parametrize("overrides,message", [
    (["probe=mlp1"], "the probe family mlp1: a structural probe is a linear map B (Hewitt & Manning 2019), of the "
                     "linear family. Fix: probe=linear (the tree tasks' default), with probe.rank=r for B's rank"),
    (["probe.module.dropout=0.1"], "probe.module.dropout=0.1: a structural probe is trained without dropout, as the "
                                   "reference. Fix: probe.module.dropout=0"),
    (["probe.mdl=true"], "probe.mdl=true sends labels with the online code"),
    (["probe.module.l1=0.001"], "probe.module.l1=0.001, probe.module.l2=0.0: a structural probe is trained without an "
                                "elastic-net penalty. Fix: probe.module.l1=0 probe.module.l2=0"),
    (["probe.level=type"], "probe.level=type is a setting of the s-class task"),
    (["probe.reuse=somewhere"], "probe.reuse scores saved s-class probes; task=tree_distance trains its own"),
    (["probe.pair_product=true"], "probe.pair_product=true multiplies the two words of a pair, and "
                                  "task=tree_distance has no word pairs"),
])
def test_what_the_tree_task_cannot_do_is_refused_before_anything_is_read(tmp_path, tiny, overrides, message):
    with pytest.raises(Exception) as refused:
        probe.run(compose_job("probe", tmp_path, "task=tree_distance", *overrides, *tiny))
    error = probing_cause(refused.value)
    assert isinstance(error, ProbingError) and message in str(error), refused.value
    assert not (tmp_path / "stores").exists()


def test_a_treebank_that_is_no_tree_is_one_error_line(tmp_path, tiny_bert_path):
    treebank = tmp_path / "bank"
    treebank.mkdir()
    sentence = "1\tA\ta\tDET\tDT\t_\t0\troot\t_\t_\n2\tB\tb\tNOUN\tNN\t_\t0\troot\t_\t_\n\n"
    for split in ("train", "dev"):
        (treebank / f"x-{split}.conllu").write_text(sentence * 3, encoding="utf-8")
    result = run_script("probe.py", "task=tree_distance", f"data.data_dir={treebank}",
                        f"model.name_or_path={tiny_bert_path}", "logger=none", cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2
    assert lines[-1].startswith(f"error: {treebank / 'x-train.conllu'}:1: 2 words headed by 0")
    assert "Traceback" not in result.stderr


def test_a_folder_without_treebank_files_names_data_data_dir(tmp_path, tiny):
    """The tree source's messages name its own key (data.source.paths), which a tree task sets from data.data_dir."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProbingError, match=r"no \*.conll\* files in the folder. Fix: set `data.data_dir`"):
        probe.run(compose_job("probe", tmp_path, "task=tree_distance", f"data.data_dir={tmp_path / 'empty'}", *tiny))
