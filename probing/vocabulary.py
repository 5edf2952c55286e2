"""The names that results.json files share between the jobs that write them (probing.tasks and the objects they
build) and the report that reads them (probing.report): one home for each, imported by all. Split names live with
the splits (probing.data.splits: SPLIT_NAMES, EVAL_SPLITS, SEEN); the name of each analysis of analyze.py (its
`analysis.name`, the "analysis" of its results) with its report section (`ANALYSIS` of its probing.report module),
so that adding an analysis changes no list here."""

# probe.py's baselines (`baseline=<name>` or `layer=<name>`) -> the representation label of their results.
BASELINE_LABELS = {"prand": "P-Rand", "pstatic": "P-static", "bertw": "BERTw", "pbert": "P-BERT"}
# The type-level space of random word vectors (conf/embeddings/rand.yaml); the BERTw space is BASELINE_LABELS["bertw"].
RAND = "Rand"

# What a probed representation gives (probe.level): a vector per word in context, or one per word type (Zhao et al.
# 2020 Fig. 1).
LEVELS = ("context", "type")

# probe.py's representation of the learned scalar mix of every layer (`layer=mix`), and its kind in the report.
MIX = "mix"

# probe.py's default task (`task=sclass`, task.kind "sclass"): Zhao et al.'s s-class probing; any other task of
# conf/task/ that probe.py takes is a word or word-pair task.
SCLASS_TASK = "sclass"
# The probe families (`probe=linear|mlp1|mlp2`; sclass_mlp is Zhao et al.'s MLP-1; results' "probe_family"), in the
# order of Hewitt & Liang (2019).
PROBE_FAMILIES = ("linear", "mlp1", "mlp2")
# The concept erasers of probe.py erase=... (conf/erase/, probing/erasure/), in the report's order; the last
# is the control (random directions).
ERASURE_METHODS = ("leace", "inlp", "mean_projection", "random")
# The scores of a structural probe of each kind (Hewitt & Manning 2019; results' `kind`), the headline first.
TREE_SCORES = {"distance": ("uuas", "dspr"), "depth": ("root_acc", "nspr")}
# The sentence lengths (in words) whose Spearman correlations DSpr. and NSpr. average over, as Hewitt & Manning's.
SPEARMAN_LENGTHS = (5, 50)
# Why each score of a structural probe can be undefined on a split (recorded as null, with a warning).
TREE_UNDEFINED = {
    "uuas": "no sentence has two words that are not punctuation: no gold edge to find",
    "root_acc": "no sentence has a word that is not punctuation",
    **dict.fromkeys(("dspr", "nspr"), f"no sentence of {SPEARMAN_LENGTHS[0]} to {SPEARMAN_LENGTHS[1]} words (the "
                                      "lengths it averages over) has a defined correlation"),
}
