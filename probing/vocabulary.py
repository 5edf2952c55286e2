"""The names that results.json files share between the jobs that write them (probing.tasks and the objects they
build) and the report that reads them (probing.report): one home for each, imported by all. Split names live with
the splits (probing.data.splits: SPLIT_NAMES, EVAL_SPLITS, SEEN)."""

# analyze.py's analyses: `analysis.name` and the "analysis" key of their results.json.
ATTENTION_SIMILARITY = "attention_similarity"
CONTEXTUALITY = "contextuality"
ISOTROPY = "isotropy"
STATIC_PC = "static_pc"

# probe.py's baselines (`baseline=<name>` or `layer=<name>`) -> the representation label of their results.
BASELINE_LABELS = {"prand": "P-Rand", "pstatic": "P-static", "bertw": "BERTw", "pbert": "P-BERT"}
# The type-level space of random word vectors (conf/embeddings/rand.yaml); the BERTw space is BASELINE_LABELS["bertw"].
RAND = "Rand"

# probe.py's representation of the learned scalar mix of every layer (`layer=mix`), and its kind in the report.
MIX = "mix"

# probe.py's default task (`task=sclass`, task.kind "sclass"): Zhao et al.'s s-class probing; any other task of
# conf/task/ that probe.py takes is a word or word-pair task.
SCLASS_TASK = "sclass"
# The word probe families (`probe=linear|mlp1|mlp2`, results' "probe_family") in the order of Hewitt & Liang (2019).
WORD_PROBE_FAMILIES = ("linear", "mlp1", "mlp2")
