"""The principal components recorded for the report, against numpy's SVD computed here, and the probe scored on a
split by hand."""

from __future__ import annotations

import numpy as np
import pytest

from probing.probes.generalisation import PCA_DECIMALS, principal_components


def test_principal_components_match_numpys_svd_of_the_centred_vectors():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 6)) * np.array([5.0, 3.0, 1.0, 0.5, 0.2, 0.1]) + 7.0
    labels = rng.integers(0, 2, size=50)
    found = principal_components(vectors, labels)
    centred = vectors - vectors.mean(axis=0)
    _, s, vt = np.linalg.svd(centred)
    expected = centred @ vt[:2].T
    points = np.array(found["points"])
    assert points.shape == (50, 2) and found["labels"] == labels.tolist()
    for k in range(2):  # the same axis, up to its sign; the sign fixed by the largest loading
        sign = np.sign(vt[k][np.abs(vt[k]).argmax()])
        np.testing.assert_allclose(points[:, k], sign * expected[:, k], atol=10 ** -PCA_DECIMALS)
    assert found["explained_variance_ratio"] == pytest.approx((s[:2] ** 2 / (s ** 2).sum()).tolist())
    # a constant shift of every vector changes nothing, and the sign does not flip with the vectors' order
    again = principal_components(vectors[::-1] + 3.0, labels[::-1])
    np.testing.assert_allclose(np.array(again["points"])[::-1], points, atol=2 * 10 ** -PCA_DECIMALS)
