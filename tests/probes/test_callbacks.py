"""KeepBestWeights restores the weights of the epoch whose dev score was best, under a real Trainer."""

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from probing.probes.callbacks import KeepBestWeights

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
