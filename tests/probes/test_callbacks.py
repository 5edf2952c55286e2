"""KeepBestWeights restores the weights of the epoch whose dev score was best, under a real Trainer."""

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from probing.errors import ConfigError
from probing.probes.callbacks import (
    KeepBestWeights,
    best_epochs,
    best_weights_keeper,
    control_keeper,
    training_warnings,
)

DEV_SCORES = [0.2, 0.9, 0.4, 0.9, 0.1]  # best at epoch 1 (a later tie does not replace it); the last epoch is worst


class ScriptedScores(L.LightningModule):
    """Its one weight equals the number of the epoch just trained; its dev score follows DEV_SCORES."""

    def __init__(self):
        super().__init__()
        self.epoch_marker = torch.nn.Parameter(torch.tensor(-1.0))

    def training_step(self, batch, batch_idx):
        with torch.no_grad():
            self.epoch_marker.fill_(self.current_epoch)
        return (self.epoch_marker * 0.0).sum() + batch[0].sum() * 0.0

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        self.log("dev/micro_f1", DEV_SCORES[self.current_epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(2, 1)), batch_size=2)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(2, 1)), batch_size=2)


def test_weights_of_the_best_dev_epoch_are_restored():
    keep_best = KeepBestWeights(monitor="dev/micro_f1")
    module = ScriptedScores()
    trainer = L.Trainer(max_epochs=len(DEV_SCORES), callbacks=[keep_best], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(module)
    assert keep_best.best_epoch == 1 and abs(keep_best.best_score - 0.9) < 1e-6
    assert module.epoch_marker.item() == 1.0


def test_a_dev_score_of_zero_in_every_epoch_is_a_warning_in_the_results():
    warnings = training_warnings(0.0, epochs=3)
    assert len(warnings) == 1 and "stayed 0 in all 3 epochs" in warnings[0]
    assert training_warnings(None, epochs=3) == warnings and training_warnings(0.2, epochs=3) == []


def test_the_best_weights_keeper_of_the_probes_is_required():
    keeper = KeepBestWeights(submodule="probes")
    assert best_weights_keeper([KeepBestWeights(submodule="control_probes"), keeper]) is keeper
    with pytest.raises(ConfigError, match="callbacks.keep_best is missing"):
        best_weights_keeper([KeepBestWeights(submodule="control_probes")])


def test_each_head_reports_the_epoch_of_the_weights_it_kept():
    probes, control = KeepBestWeights(submodule="probes"), control_keeper(seen_split=False)
    probes.best_epoch, control.best_epoch = 4, 1
    assert best_epochs([probes, control]) == {"best_epoch": 4, "control_best_epoch": 1}
    assert best_epochs([probes]) == {"best_epoch": 4}
    assert control.monitor == "dev/control_micro_f1" and control_keeper(seen_split=True).monitor == "dev/micro_f1"
