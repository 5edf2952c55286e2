"""probe.py's statement probes beyond their own data (probe.eval_on): the probe trained on one dataset scored on the
test split of others, each read from its own store, on a tiny random Llama; the bundled number comparisons as two
datasets (larger_than, smaller_than); the refusals; the principal components recorded for the report."""

from __future__ import annotations

import numpy as np
import pytest

from probing.data.statements import NumberComparisons
from probing.errors import ConfigError
from probing.features.store import FeatureStore
from probing.tasks import probe
from tests.helpers.runs import compose_job, probe_in_process
from tests.tasks.test_probe_statements import tiny_llama, write_statements  # noqa: F401 (a fixture)


def test_the_bundled_comparisons_split_into_two_datasets_by_relation():
    every = NumberComparisons().load_statements()
    larger = NumberComparisons(name="larger_than", seed=3).load_statements()
    smaller = NumberComparisons(name="smaller_than", seed=3).load_statements()
    for data, relation in ((larger, " is larger than "), (smaller, " is smaller than ")):
        texts = [text for split in data.splits.values() for text in split.texts]
        assert len(texts) == 300 and all(relation in text for text in texts)
        assert data.summary()["test"] == {"0": 30, "1": 30} and data.split["seed"] == 3
    both = {text for split in every.splits.values() for text in split.texts}
    assert {text for data in (larger, smaller) for split in data.splits.values() for text in split.texts} == both
    assert NumberComparisons(name="smaller_than", seed=3).other("larger_than").load_statements().splits[
        "test"].sources == larger.splits["test"].sources
    with pytest.raises(ConfigError, match="larger_than or smaller_than"):
        NumberComparisons(name="cities")


def test_a_probe_is_scored_on_the_test_split_of_each_other_dataset(tmp_path, tiny_llama):  # noqa: F811
    r = probe_in_process(tmp_path, "gen", "task=truth", "data.name=larger_than", "layer=2", "probe=mass_mean",
                         "probe.eval_on=[smaller_than,larger_than]", *tiny_llama)
    assert r["data"] == "larger_than" and list(r["eval_on"]) == ["smaller_than", "larger_than"]
    own, other = r["eval_on"]["larger_than"], r["eval_on"]["smaller_than"]
    # the probe's own test split scored by this path and by the Trainer's test loop (torchmetrics) agree
    assert own["accuracy"] == pytest.approx(r["test"]["accuracy"]) and own["n_examples"] == 60
    smaller = NumberComparisons(name="smaller_than").load_statements()
    assert other["test_lines"] == [int(s.rsplit(":", 1)[1]) for s in smaller.splits["test"].sources]
    assert other["labels"] == {"0": 30, "1": 30} and other["dropped"] == 0 and other["n_examples"] == 60
    assert other["data_split"] == {"seed": 0, "dev_fraction": 0.2, "test_fraction": 0.2}
    assert 0.0 <= other["accuracy"] <= 1.0
    # each dataset's vectors come from its own store: only the test split of the other dataset was extracted
    stores = sorted((tmp_path / "gen" / "stores").rglob("*.h5"))
    names = [(FeatureStore(path).metadata["data"], FeatureStore(path).metadata["split"]) for path in stores]
    assert sorted(names) == sorted([("larger_than", s) for s in ("train", "dev", "test")]
                                   + [("smaller_than", "test")])
    pca = r["principal_components"]
    assert len(pca["points"]) == len(pca["labels"]) == 300 and pca["splits"] == ["train", "dev", "test"]


@pytest.mark.parametrize(("overrides", "message"), [
    (["task=upos"], "probe.eval_on scores a probe on the test split of other datasets, and task=upos"),
    (["task=truth", "erase=leace", "erase.concept=truth"], "which an eraser"),
    (["task=truth", "data.name=larger_than"], "cities is not a dataset of the number comparisons"),
])
def test_eval_on_is_refused_in_one_line_where_it_cannot_apply(tmp_path, tiny_llama, overrides, message):  # noqa: F811
    with pytest.raises(ConfigError, match=message) as error:
        probe.run(compose_job("probe", tmp_path, *overrides, "probe.eval_on=[cities]", "layer=2", *tiny_llama))
    assert "\n" not in str(error.value) and "probe.eval_on" in str(error.value)


def test_a_users_file_has_no_other_dataset(tmp_path, tiny_llama):  # noqa: F811
    path = write_statements(tmp_path / "mine.csv", 20)
    with pytest.raises(ConfigError, match="one file with no other dataset") as error:
        probe.run(compose_job("probe", tmp_path, "task=statements", f"data.path={path}", "probe.eval_on=[other]",
                              "layer=2", *tiny_llama))
    assert "\n" not in str(error.value) and "probe.eval_on=[]" in str(error.value)


def write_dataset(folder, name, n, offset=0, labels=("0", "1")):
    """The paper's format (statement,label) with `n` statements, half of each label."""
    rows = [f"City {i + offset} is in country {i % 3}.,{labels[i % 2]}" for i in range(n)]
    (folder / f"{name}.csv").write_text("statement,label\n" + "\n".join(rows) + "\n", encoding="utf-8")


def test_the_papers_datasets_by_name_in_the_same_folder_with_a_gradient_trained_probe(tmp_path, tiny_llama):  # noqa: F811
    folder = tmp_path / "datasets"
    folder.mkdir()
    write_dataset(folder, "cities", 40)
    write_dataset(folder, "neg_cities", 30, offset=100)
    write_dataset(folder, "yes_no", 20, labels=("no", "yes"))
    data = ["task=truth", "data=geometry_of_truth", f"data.data_dir={folder}", "data.seed=4", "layer=1",
            "probe=linear", "trainer.max_epochs=2", *tiny_llama]
    r = probe_in_process(tmp_path, "paper", *data, "probe.eval_on=[neg_cities,cities]")
    assert r["eval_on"]["cities"]["accuracy"] == pytest.approx(r["test"]["accuracy"])
    other = r["eval_on"]["neg_cities"]
    assert other["n_examples"] == 6 and other["labels"] == {"0": 3, "1": 3}
    assert other["data_split"]["seed"] == 4 and other["data_files"] == [str(folder / "neg_cities.csv")]
    # the rows of neg_cities' test split, drawn as a run on neg_cities alone draws them (+1: the header line)
    from probing.data.statements import stratified_split

    expected = stratified_split(np.array([i % 2 for i in range(30)]), 0.2, 0.2, 4)["test"]
    assert other["test_lines"] == [int(i) + 2 for i in expected]
    with pytest.raises(ConfigError, match=r"yes_no has the labels \['no', 'yes'\]") as error:
        probe.run(compose_job("probe", tmp_path / "labels", *data, "probe.eval_on=[yes_no]"))
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError) as error:  # a dataset the folder lacks, named with those it has
        probe.run(compose_job("probe", tmp_path / "missing", *data, "probe.eval_on=[cites]"))
    assert str(error.value).startswith(f"probe.eval_on names datasets beside cities, and {folder} has no cites.csv "
                                       "(it has cities, neg_cities, yes_no). Fix: probe.eval_on=[]")
    with pytest.raises(ConfigError) as error:
        probe.run(compose_job("probe", tmp_path / "name", *data, "data.name=cites"))
    assert str(error.value) == (f"data.name=cites: {folder} has no cites.csv (it has cities, neg_cities, yes_no). "
                                "Fix: data.name= one of those, or data.data_dir= the folder that holds it")
    nowhere = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match=f"^data.data_dir={nowhere}: no such folder. Fix: data.data_dir="):
        probe.run(compose_job("probe", tmp_path / "folder", *data, f"data.data_dir={nowhere}"))


@pytest.mark.slow
@pytest.mark.shared_data
def test_minilm_trained_on_cities_is_scored_on_neg_cities(tmp_path, minilm_path, shared_data):
    """The paper's cities and neg_cities with the packaged MiniLM (CI: about 30 s on 2 CPU cores)."""
    from probing.data.statements import GeometryOfTruth

    folder = shared_data / "geometry_of_truth"
    r = probe_in_process(tmp_path, "minilm", "task=truth", "model=minilm", "data=geometry_of_truth",
                         "data.name=cities", f"data.data_dir={folder}", "layer=4", "probe=mass_mean",
                         "probe.eval_on=[neg_cities,cities]", "logger=csv")
    assert r["eval_on"]["cities"]["accuracy"] == pytest.approx(r["test"]["accuracy"])
    other = r["eval_on"]["neg_cities"]
    test = GeometryOfTruth(str(folder), "neg_cities").load_statements().splits["test"]
    assert other["n_examples"] + other["dropped"] == len(test) and other["dropped"] == 0
    assert other["test_lines"] == [int(source.rsplit(":", 1)[1]) for source in test.sources]
    assert 0.0 <= other["accuracy"] <= 1.0 and len(r["principal_components"]["points"]) == 1496


def test_the_principal_components_are_those_of_the_stored_vectors_at_most_a_seeded_sample(tmp_path, tiny_llama,  # noqa: F811
                                                                                          monkeypatch):
    import torch

    from probing.probes import statement_probes
    from probing.probes.datamodule import read_every_word_store
    from probing.probes.generalisation import principal_components

    monkeypatch.setattr(statement_probes, "PCA_STATEMENTS", 100)
    r = probe_in_process(tmp_path, "pca", "task=truth", "data.name=smaller_than", "layer=2", "probe=mass_mean",
                         *tiny_llama)
    pca = r["principal_components"]
    assert pca["statements"] == 300 and len(pca["points"]) == len(pca["labels"]) == 100
    # the same numbers from the stores themselves: train, dev and test in that order, the seeded draw of 100
    stores = {FeatureStore(path).metadata["split"]: path for path in (tmp_path / "pca" / "stores").rglob("*.h5")}
    vectors, labels = [], []
    data = NumberComparisons(name="smaller_than").load_statements()
    for split in ("train", "dev", "test"):
        stored, position = read_every_word_store(stores[split], 2, len(data.splits[split]))
        vectors.append(stored[torch.from_numpy(position)].float().numpy())
        labels.append(data.splits[split].label)
    drawn = np.sort(np.random.default_rng(0).choice(300, 100, replace=False))
    expected = principal_components(np.concatenate(vectors)[drawn], np.concatenate(labels)[drawn])
    np.testing.assert_allclose(pca["points"], expected["points"], atol=1e-3)
    assert pca["labels"] == expected["labels"]
