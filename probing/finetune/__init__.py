"""Fine-tuning an encoder on a task (POS, NER, SST-2, MRPC): the LightningModule, its data, the isotropy penalty, and
the export of the best model as a Hugging Face folder that probing and geometry load like any pretrained one."""
