"""Everything that turns words in context into vectors and keeps them: encoders, baselines, word spaces, the HDF5 store."""
