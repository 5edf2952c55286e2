"""The online probes (`probing.probes.online`) fitted by a Lightning Trainer: the probes of every asked-for layer of
a tiny random Llama, trained straight from its forward pass with the control task beside them, reach per layer the
dev and test accuracies, control accuracies and best epochs of the same probes trained by a plain PyTorch loop on the
vectors that extraction stores (`WordEncoder.encode` of every record; tests/helpers/online_reference.py), same seed
and batch order."""

from __future__ import annotations

import csv
from functools import partial

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from probing.data.statements import StatementFile
from probing.features.encoder import WordEncoder
from probing.probes.callbacks import KeepBestWeights
from probing.probes.components.families import linear
from probing.probes.online import CONTROL, PROBES, OnlineProbes
from probing.probes.online_data import OnlineDataModule, SeededBatches, forward_source, prepared_splits, stored_source
from tests.helpers.online_reference import train_layer_probes
from tests.helpers.tiny_decoders import save_tiny_llama

LAYERS = [0, 2, 3]
SEED, CONTROL_SEED, EPOCHS, BATCH = 0, 5, 4, 32


def family():
    """A linear probe with a learning rate that learns the verb in a few epochs."""
    return linear(optimizer=partial(torch.optim.Adam, lr=0.05, fused=True))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    path = save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
    return WordEncoder(str(path), pooling="last", layers=LAYERS)


@pytest.fixture(scope="module")
def splits(encoder, tmp_path_factory):
    """300 statements whose label is their verb ("Cats number 7 can fly." 0, "... can run." 1), split 60/20/20,
    tokenised: the last token is always "." so that layer 0 reads nothing and the blocks see the verb before it."""
    path = tmp_path_factory.mktemp("statements") / "cats.csv"
    rows = [f"Cats number {i} can {'fly' if i % 2 else 'run'}.,{1 - i % 2}" for i in range(300)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    data = StatementFile(str(path)).load_statements().store_data()
    prepared = prepared_splits(encoder, data.splits, data.classes)
    assert [len(split) for split in prepared.values()] == [len(split) for split in data.splits.values()]
    return prepared


def stored_vectors(encoder, splits):
    """(N, layers, D) per split, as extraction stores them: encoded in batches of their own."""
    return {name: torch.cat([encoder.encode(split.prepared[i:i + 64]) for i in range(0, len(split), 64)])
            for name, split in splits.items()}


@pytest.fixture(scope="module")
def fitted(encoder, splits, tmp_path_factory):
    """The online module fitted by a Trainer with the CSV logger and the whole-module best-weights keeper of
    callbacks=default, then scored on dev and test as probe.py does."""
    datamodule = OnlineDataModule(splits, BATCH, SEED, CONTROL_SEED)
    L.seed_everything(SEED)
    module = OnlineProbes(forward_source(encoder, splits), LAYERS, 32, ["False", "True"], family(), control=True)
    trainer = L.Trainer(max_epochs=EPOCHS, logger=CSVLogger(tmp_path_factory.mktemp("csv"), name="csv"),
                        callbacks=[KeepBestWeights(monitor="dev/micro_f1", submodule="probes")], accelerator="cpu",
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        log_every_n_steps=1)
    trainer.fit(module, datamodule=datamodule)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)
    return module, trainer


def test_every_layers_probe_and_control_probe_match_the_plain_loop_on_the_stored_vectors(encoder, splits, fitted):
    module, _ = fitted
    reference = train_layer_probes(stored_source(stored_vectors(encoder, splits)),
                                   {name: split.labels for name, split in splits.items()}, LAYERS, 32, 2, family(),
                                   EPOCHS, BATCH, SEED, control_seed=CONTROL_SEED)
    for split in ("dev", "test"):
        scores = module.split_scores[split]
        assert [each["accuracy"] for each in scores] == reference[split]
        assert [each["control_accuracy"] for each in scores] == reference[f"control_{split}"]
        assert [each["selectivity"] for each in scores] == [
            accuracy - control for accuracy, control in zip(reference[split], reference[f"control_{split}"])]
        assert all(each["n_examples"] == len(splits[split]) for each in scores)
    assert module.best_epoch[PROBES].tolist() == reference["best_epoch"]
    assert module.best_epoch[CONTROL].tolist() == reference["control_best_epoch"]
    # layer 0 reads the "." alone: chance; a later layer learned the verb (agreeing on chance would prove little)
    assert reference["dev"][0] == pytest.approx(0.5, abs=0.05) and reference["dev"][-1] > 0.75


def test_each_epoch_logs_every_layers_dev_scores_to_the_csv_logger(fitted):
    module, trainer = fitted
    with open(f"{trainer.logger.log_dir}/metrics.csv", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    columns = {f"dev/layer{layer}/{name}" for layer in LAYERS
               for name in ("accuracy", "macro_f1", "control_accuracy", "selectivity")}
    assert columns <= set(rows[0])
    dev = [row for row in rows if row["dev/layer0/accuracy"]]
    # each epoch's dev pass (the sanity check's is not logged), then the validation after fitting
    assert [int(row["epoch"]) for row in dev] == [*range(EPOCHS), EPOCHS]
    final = dev[-1]
    for layer, scores in zip(LAYERS, module.split_scores["dev"]):
        assert float(final[f"dev/layer{layer}/accuracy"]) == pytest.approx(scores["accuracy"])
        assert float(final[f"dev/layer{layer}/selectivity"]) == pytest.approx(scores["selectivity"])
    assert float(final["dev/micro_f1"]) == pytest.approx(max(each["accuracy"] for each in module.split_scores["dev"]))


def test_a_checkpoint_carries_each_layers_best_weights(fitted, encoder, splits):
    module, _ = fitted
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    fresh = OnlineProbes(forward_source(encoder, splits), LAYERS, 32, ["False", "True"], family(), control=True)
    fresh.on_load_checkpoint(checkpoint)
    assert fresh.best_epoch[PROBES].tolist() == module.best_epoch[PROBES].tolist()
    assert torch.equal(fresh.kept[CONTROL]["w1"], module.kept[CONTROL]["w1"])


def test_the_training_order_is_one_permutation_per_epoch_from_the_seed():
    batches = SeededBatches(10, 4, seed=3)
    generator = torch.Generator().manual_seed(3)
    for _ in range(2):
        assert list(batches) == [chunk.tolist() for chunk in torch.randperm(10, generator=generator).split(4)]
    assert len(batches) == 3
