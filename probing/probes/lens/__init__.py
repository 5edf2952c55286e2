"""The logit lens and the tuned lens of a causal LM (analyze.py analysis=lens): each layer's residual stream read
through the final norm and the unembedding, as is or through a trained affine map, scored in bits per token."""
