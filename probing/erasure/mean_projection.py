"""Mean projection: project out the span of the class-mean differences mu_c - mu (rank <= K - 1): the class means
become equal, with the smallest orthogonal projection that does it."""

from __future__ import annotations

import torch

from probing.erasure.eraser import ConceptEraser, orthonormal_basis


class MeanProjectionEraser(ConceptEraser):
    """Project out span{mu_c - mu} over the classes present (rank <= K - 1), orthogonally about the training mean."""

    method = "mean_projection"

    def directions(self, centred, labels, num_classes, held_out):
        counts = torch.bincount(labels, minlength=num_classes)
        rows = centred.whole()
        sums = rows.new_zeros(num_classes, centred.shape[1]).index_add_(0, labels, rows)
        class_means = sums[counts > 0] / counts[counts > 0, None]  # the centred data: mu_c - mu
        basis = orthonormal_basis(class_means.T)
        return basis, basis.T, {}
