"""The word-task datamodule over every-word stores, checked by hand: a pair example gathers its dependent's and its
head's vectors, control labels are one per word type drawn from the training label distribution, and the MDL order
is a seeded permutation of the training examples."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from probing.data.every_word import every_word_data
from probing.data.word_tasks import ConlluWordTask, JsonlWordTask
from probing.features.elmo_hdf5 import ElmoFileFeaturizer
from probing.features.provision import ensure_features
from probing.probes.bits.mdl import OnlineCode
from probing.probes.controls import class_distribution
from probing.probes.word_data import WordTaskDataModule
from tests.data.test_word_tasks import treebank  # noqa: F401  (the fixture)
from tests.features.test_elmo_hdf5 import write_elmo

DIM = 4


def word_vectors(sentence: int, words: int) -> np.ndarray:
    """(1 layer, words, DIM): word w of sentence i is (i, w, 10 i + w, 1), so a vector names its word."""
    rows = [[sentence, w, 10 * sentence + w, 1] for w in range(words)]
    return np.asarray([rows], dtype=np.float32)


def datamodule(data, tmp_path, **settings) -> WordTaskDataModule:
    """The datamodule of `data` over every-word stores filled from an ELMo file of `word_vectors`."""
    sentences = [words for split in data.splits.values() for words in split.sentences]
    unique = list(dict.fromkeys(sentences))
    tmp_path.mkdir(parents=True, exist_ok=True)
    values = [word_vectors(i, len(words)) for i, words in enumerate(unique)]
    path = write_elmo(tmp_path / "vectors.hdf5", unique, values)
    with ElmoFileFeaturizer(path) as featurizer:
        stores = ensure_features(every_word_data(data), featurizer, store_dir=tmp_path / "stores", dtype="float32",
                                 max_tokens_per_batch=64, lock_wait_s=0)
    module = WordTaskDataModule(stores, data, layer=0, **settings)
    module.setup()
    return module, unique


def test_a_pair_example_is_its_dependents_vector_then_its_heads(treebank, tmp_path):  # noqa: F811
    data = ConlluWordTask("deprel", paths=str(treebank)).load_word_task()
    module, sentences = datamodule(data, tmp_path, pair_product=True)
    train = module.splits["train"]
    batch = train[list(range(len(train)))]
    assert batch["features"].shape == (len(train), 3 * DIM) and module.feature_dim == 3 * DIM
    split = data.splits["train"]
    for row, (sentence, word, head) in enumerate(zip(split.sentence, split.word, split.second)):
        index = sentences.index(split.sentences[sentence])
        vectors = torch.tensor(word_vectors(index, 9)[0])
        dependent, governor = vectors[word], vectors[head]
        torch.testing.assert_close(batch["features"][row], torch.cat([dependent, governor, dependent * governor]))
    # "cats" -nsubj-> "sleep" in the first sentence: positions 1 and 4
    nsubj = data.labels.index("nsubj")
    first = [row for row in range(len(train)) if batch["label"][row] == nsubj][0]
    assert batch["features"][first][[1, DIM + 1]].tolist() == [1.0, 4.0]


def jsonl_task(tmp_path, n_types: int = 400) -> JsonlWordTask:
    """Each of `n_types` word types occurs in three sentences (train twice, dev once); labels a (60 %), b (30 %),
    c (10 %) by type."""
    rng = np.random.default_rng(0)
    labels = rng.choice(["a", "b", "c"], size=n_types, p=[0.6, 0.3, 0.1])
    lines = []
    for split, copies in (("train", 2), ("dev", 1)):
        for _ in range(copies):
            for start in range(0, n_types, 8):
                words = [f"w{t}" for t in range(start, min(start + 8, n_types))]
                lines.append({"split": split, "tokens": words, "labels": [labels[int(w[1:])] for w in words]})
    path = tmp_path / "task.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return JsonlWordTask(str(path))


def test_control_labels_are_one_per_word_type_drawn_from_the_training_label_distribution(tmp_path):
    data = jsonl_task(tmp_path).load_word_task()
    module, _ = datamodule(data, tmp_path, control_seed=3)
    by_type: dict[str, set[int]] = {}
    for split_name, split in module.splits.items():
        types = data.splits[split_name].word_types()
        for word, control in zip(types, split.tensors["control_label"].tolist()):
            by_type.setdefault(word, set()).add(control)
    assert all(len(controls) == 1 for controls in by_type.values())  # one label per type, in train and dev alike
    drawn = Counter(next(iter(controls)) for controls in by_type.values())
    expected = class_distribution(np.bincount(data.splits["train"].label, minlength=len(data.labels)))
    frequencies = np.array([drawn[k] for k in range(len(data.labels))]) / len(by_type)
    assert np.abs(frequencies - expected).max() < 0.08  # 400 types: a few standard errors
    again, _ = datamodule(data, tmp_path / "again", control_seed=3)
    assert torch.equal(again.splits["dev"].tensors["control_label"], module.splits["dev"].tensors["control_label"])


def test_the_mdl_order_is_a_seeded_permutation_of_the_training_examples(tmp_path):
    data = jsonl_task(tmp_path, n_types=40).load_word_task()
    module, _ = datamodule(data, tmp_path, online_code=OnlineCode(seed=5))
    order = module.splits["train"].tensors["order"]
    assert sorted(order.tolist()) == list(range(len(module.splits["train"])))
    assert order.tolist() != sorted(order.tolist()) and "order" not in module.splits["dev"].tensors
    in_order = [int(position) for batch in module.train_dataloader_in_order() for position in batch["order"]]
    assert in_order == order.tolist()
    other, _ = datamodule(data, tmp_path / "other", online_code=OnlineCode(seed=6))
    assert not torch.equal(other.splits["train"].tensors["order"], order)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_same_seed_gives_the_same_order(tmp_path, seed):
    data = jsonl_task(tmp_path, n_types=40).load_word_task()
    first, _ = datamodule(data, tmp_path / "a", online_code=OnlineCode(seed=seed))
    second, _ = datamodule(data, tmp_path / "b", online_code=OnlineCode(seed=seed))
    assert torch.equal(first.splits["train"].tensors["order"], second.splits["train"].tensors["order"])
