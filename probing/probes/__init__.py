"""The probes on frozen features: the LightningModule, its components, datamodule, metrics, controls and callbacks."""
