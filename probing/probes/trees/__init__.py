"""The structural probes of Hewitt & Manning (2019): the distance and depth probe module, its map B, the datamodule
of whole sentences, the reference's metrics (UUAS, Spearman, root accuracy) and what a run records beside them."""
