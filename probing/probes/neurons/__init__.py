"""Neuron-level analysis (analyze.py analysis=neurons): the rankings of a layer's dimensions, the probes retrained on
a few of them, and the analysis component that runs both on a word task."""
