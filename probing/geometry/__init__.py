"""Analyses of an encoder's representations and attention that train nothing (DESIGN.md: the geometry wing).

Each analysis is a measures module and, beside it, its component `<name>_analysis.py` (a
probing.analysis.Analysis built by conf/analysis/<name>.yaml): attention-map similarity of two models (Zhao
et al. 2020, Fig. 7), contextuality and PC static embeddings (Ethayarajh 2019; their shared word occurrences and
store in `occurrence_analysis.py`), isotropy (Bis et al. 2021), and the word benchmarks they are scored on."""
