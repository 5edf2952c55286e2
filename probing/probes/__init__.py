"""The probes on frozen features: one pipeline (task_probes), the probe modules (a built family plus the parts each
kind uses), datamodules, metrics, controls, callbacks and saved probes; trees/, neurons/ and bits/ by concept."""
