"""Concept erasure, shared by probe.py's erased probing (probing.probes) and amnesic probing (probing.finetune): one
method a module (leace, inlp, mean_projection, random_control) on a common base (eraser), the fitted edit (fitted) and
its file (file), the edit of the host's rows on a device (on_device), guardedness, the hook that edits a hidden state
inside a forward pass (hidden_state), what `erase=` builds (setup) and an eraser applied in a probe run (applied).
docs/erasure.md explains the choices."""
