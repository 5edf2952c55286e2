"""Statement probes beyond their own data: the probe trained on one dataset scored on the test split of others
(`probe.eval_on`), and the first two principal components of the statements' vectors (Marks & Tegmark 2024, Fig. 1),
both recorded in results.json for the report. See docs/statements.md, 'Generalisation'."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

PCA_DECIMALS = 4  # the principal-component coordinates are recorded rounded: a plot's worth, a small file


def scored_on(module: Any, split: Any, batch_size: int = 1024) -> dict[str, Any]:
    """The accuracy of `module`'s task probe on the statements of `split` (a GatheredSplit with `label`), predicted as
    the module scores its own splits: the arg-max of its logits."""
    was_training = module.training
    module.eval()
    correct = 0
    labels = split.tensors["label"]
    with torch.no_grad():
        for start in range(0, len(split), batch_size):
            rows = torch.arange(start, min(start + batch_size, len(split)))
            features = module.probed(split.features(split.rows[rows], None).to(module.device))
            target = labels[rows].to(module.device)
            correct += int((module.probes(features)[:, 0].argmax(-1) == target).sum())
    module.train(was_training)
    return {"accuracy": correct / len(split) if len(split) else None, "n_examples": len(split)}


def principal_components(vectors: np.ndarray, labels: np.ndarray, keep: int = 2) -> dict[str, Any]:
    """The first `keep` principal components of `vectors` (N, D), centred on their mean: each vector's coordinates
    (`points`, N × keep), its label, and each component's share of the variance. A component's sign is fixed so that
    its largest loading (in absolute value) is positive, so that two runs on the same vectors draw the same picture."""
    centred = vectors.astype(np.float64) - vectors.astype(np.float64).mean(axis=0)
    _, singular, components = np.linalg.svd(centred, full_matrices=False)
    components = components[:keep]
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    components = components * np.where(signs == 0, 1.0, signs)[:, None]
    total = float((singular ** 2).sum())
    return {"points": np.round(centred @ components.T, PCA_DECIMALS).tolist(),
            "labels": labels.astype(int).tolist(),
            "explained_variance_ratio": [float(s ** 2 / total) if total else 0.0 for s in singular[:keep]]}
