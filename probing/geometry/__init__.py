"""Analyses of an encoder's representations and attention that train nothing (DESIGN.md: the geometry wing):
attention-map similarity of two models (Zhao et al. 2020, Fig. 7), and the sentences such analyses run on."""
