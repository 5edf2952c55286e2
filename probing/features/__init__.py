"""Words in context -> vectors, and where they are kept: encoders, baselines, word spaces, the HDF5 store."""
