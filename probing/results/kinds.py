"""The kinds of results.json, one declared type each: what every run of that kind writes (required keys, documented),
and what some of its runs add (optional keys, default ABSENT). A run may write more keys than its type names (an
analysis's settings, a probe's extra scores); the types name those the report and the other jobs read.

Stdlib dataclasses, not pydantic models: the writers keep a results.json a dict, and the report builds a run's type
from the dict it reads (`probing.results.load`), so what the types must give is their fields, types and docs, which
`probing.results.schema` turns into JSON Schema in a few lines without a dependency; validation is the `jsonschema`
package on that schema."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

SCHEMA_VERSION = 2  # 2: the features' weights_dtype and forward_precision (probing.results.migrate)
JOBS = ("probe", "extract", "train", "analyze")
ABSENT = None  # the default of a key that not every run of its kind writes
Number = float  # an int or a float (JSON's number)
Scores = dict[str, Any]  # scores by name: numbers (null where nothing was scored), lists by class, counts


def key(doc: str, *, optional: bool = False) -> Any:
    """A documented field; `optional`: some runs of the kind leave the key out."""
    if optional:
        return dataclasses.field(default=ABSENT, metadata={"doc": doc, "optional": True})
    return dataclasses.field(metadata={"doc": doc})


@dataclasses.dataclass(frozen=True, kw_only=True)
class FeaturesKeys:
    """The fields of the features' identity (probing.features.identity.FeatureIdentity) that say how a model's
    vectors were made: what probe runs and neuron rankings record alike."""

    weights_sha256: str | None = key("The SHA-256 of the model's weights (tells a fine-tuned encoder apart); null for "
                                     "features without a model.")
    pooling: str | None = key("How word pieces become one vector (first, mean, last, ...).")
    context_size: int | None = key("Words of context on each side; null for the whole sentence.")
    attention_window: int | None = key("The attention window of a windowed encoder; null for none.")
    attention_policy: str | None = key("How the window treats special tokens; null without a window.")
    weights_dtype: str | None = key("The dtype the model's weights were loaded in (model.dtype): bf16 or fp16; null "
                                    "for float32 or without a model. Added in schema version 2 (null in older "
                                    "results).")
    forward_precision: str | None = key("The precision of the model's forward under autocast (features.precision): "
                                        "bf16 or 16; null for float32, or where no forward ran (a baseline of the "
                                        "embeddings, static vectors). Added in schema version 2 (null in older "
                                        "results).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Results:
    """What every results.json holds."""

    KIND: ClassVar[str]
    JOB: ClassVar[str]

    schema_version: int = key("The version of the results' schema (probing.results.SCHEMA_VERSION).")
    job: str = key("The entry script that wrote the file: probe, extract, train or analyze.")
    kind: str = key("The declared kind of the results; its schema is schemas/<kind>.json in probing.results.")
    duration_s: Number = key("Wall time of the job, in seconds.")
    config: dict[str, Any] = key("The job's composed config, resolved.")
    data_files: list[list[str]] = key("Every data file the job read, as [path, SHA-256] pairs.")
    model_weights: list[list[str]] = key("Every local model folder the job loaded, as [folder, weights SHA-256] pairs "
                                         "(a relaunch refuses the results once one of them has changed).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeResults(Results, FeaturesKeys):
    """What every probe.py run holds: the task and probe, the model and features, the data, the scores."""

    JOB: ClassVar[str] = "probe"

    task: str = key("The probing task (task.name).")
    probe: str = key("The probe's config name (probe=...).")
    probe_family: str = key("The family of the probe network: linear, mlp, rank-k, mass-mean, ...")
    rank: int | None = key("The rank of a low-rank probe; null for full rank.")
    model: str = key("The model's config name (model.name).")
    # with the fields of FeaturesKeys, model_name_or_path, layer and representation: the features' identity
    # (probing.features.identity.FeatureIdentity), as saved probes and erasers record it too
    model_name_or_path: str | None = key("Where the model was loaded from; null for a baseline without a model.")
    finetuned_task: str | None = key("The task a fine-tuned encoder was trained on (its task.json); null otherwise.")
    random_init: bool = key("Whether the encoder's weights were randomly initialised.")
    data: str = key("The data set's config name (data.name).")
    level: str = key("context (words in their sentences) or type (one vector per word type).")
    embeddings: str | None = key("The static embeddings probed, if any.")
    layer: Any = key("The probed layer (an index, a list, or null for a baseline).")
    representation: str = key("The probed representation's label: a layer, AVG-l, mix, Rand, P-BERT, ...")
    seed: int = key("The run's seed.")
    control_seed: int | None = key("The control task's seed; null when it did not run.")
    dev: Scores = key("Dev scores (micro_f1, accuracy, selectivity, ... by probe kind).")
    test: Scores = key("Test scores, as dev.")
    seen: Scores = key("Scores on held-out contexts of training words (the control task's seen split), as dev.",
                       optional=True)
    epochs_trained: int = key("Epochs the Trainer ran.")
    best_epoch: int | None = key("The epoch whose dev score was kept (0-based); null for saved probes.")
    warnings: list[str] = key("What the fit warned about (a best epoch at the last one, ...).")
    mix_weights: list[Number] | None = key("The scalar mix's softmax weights, by layer.", optional=True)
    gamma: Number | None = key("The scalar mix's scale.", optional=True)
    center_of_gravity: Number | None = key("The scalar mix's center of gravity over layers (Tenney et al. 2019).",
                                           optional=True)
    bits: dict[str, Any] = key("Information measures in bits (V-information, ...).", optional=True)
    mdl: dict[str, Any] = key("The online code's description lengths (the setting probe.mdl on).", optional=True)
    erasure: dict[str, Any] = key("The concept erasure applied to the features, and its guardedness.", optional=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SClassProbeResults(ProbeResults):
    """probe.py on the s-class task of Zhao et al. 2020 (task=sclass)."""

    KIND: ClassVar[str] = "sclass_probe"

    classes: list[str] = key("The s-classes, in label order.")
    reused_probes: dict[str, Any] | None = key("The saved probes scored instead of training (probe.reuse).",
                                               optional=True)
    probes_file: str = key("Where the trained probes were saved.", optional=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WordProbeResults(ProbeResults):
    """probe.py on a word or word-pair task (one multi-class probe)."""

    KIND: ClassVar[str] = "word_probe"

    pair: bool = key("Whether the task labels word pairs.")
    pair_product: bool | None = key("Whether a pair is represented with its elementwise product; null for words.")
    labels: list[str] = key("The task's labels, in label order.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StatementProbeResults(ProbeResults):
    """probe.py on a statement task (task=truth, statements): one label per text, from one vector of the text."""

    KIND: ClassVar[str] = "statement_probe"

    labels: list[str] = key("The task's labels, in label order (the last is the positive one of two).")
    control_task: dict[str, Any] | None = key("The control task: its kind (shuffled_labels: each split's labels "
                                              "shuffled, the class balance kept) and seed; null when it did not run.")
    data_split: dict[str, Any] = key("How the statements were split: the seed and the dev and test fractions.")
    fitted: str = key("How a closed-form probe (mass-mean) was fitted.", optional=True)
    online: bool = key("Whether the probes were trained straight from the forward pass, without a store "
                       "(the probe's online setting); absent otherwise.", optional=True)
    online_layers: dict[str, Any] = key("With online probes, each probed layer's dev and test scores and best epoch "
                                        "(dev and test above: those of the best dev layer).", optional=True)
    eval_on: dict[str, dict[str, Any]] = key("The probe's test scores on other datasets (probe.eval_on): by dataset, "
                                             "accuracy, n_examples, dropped, labels, data_split, data_files and the "
                                             "file's test_lines.", optional=True)
    principal_components: dict[str, Any] | None = key("The first two principal components of the statements' "
                                                      "vectors: points, labels, explained_variance_ratio, splits, "
                                                      "statements; null for a scalar mix.", optional=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TreeProbeResults(ProbeResults):
    """probe.py on a tree task: a structural probe (Hewitt & Manning 2019). Before schema version 1, `structure` was
    written as `kind`."""

    KIND: ClassVar[str] = "tree_probe"

    structure: Literal["distance", "depth"] = key("What the structural probe predicts: distances or depths.")
    linear_baseline: dict[str, Scores] = key("The LINEAR baseline's scores by split (dev, test).")
    examples: list[dict[str, Any]] = key("A few test sentences' gold and predicted trees.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuningResults(Results):
    """train.py: a fine-tuned encoder, exported as a Hugging Face folder."""

    KIND: ClassVar[str] = "finetuning"
    JOB: ClassVar[str] = "train"

    task: str = key("The fine-tuning task (task.name).")
    model: str = key("The model's config name.")
    model_name_or_path: str = key("Where the pretrained model was loaded from.")
    attention_window: int | None = key("The attention window; null for full attention.")
    attention_policy: str | None = key("How the window treats special tokens; null without a window.")
    isotropy_reg: Number | None = key("The weight of the isotropy penalty; null or 0 for none.")
    precision: str = key("The Trainer's precision.")
    devices: int = key("Processes that trained (the world size).")
    labels: list[str] = key("The task's labels.")
    data_summary: dict[str, Any] = key("Examples per split.")
    data_skips: dict[str, Any] = key("What was left out of the data, and why.")
    dev: Scores = key("Dev scores of the best epoch (accuracy, f1, ...).")
    best_epoch: int | None = key("The epoch kept (0-based).")
    epochs_trained: int = key("Epochs the Trainer ran.")
    model_dir: str = key("The exported model's folder.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AnalysisResults(Results):
    """What every analyze.py run holds: the analysis's name (its kind) and the model analysed."""

    JOB: ClassVar[str] = "analyze"

    analysis: str = key("The analysis (analysis=...); equal to `kind`.")
    model: str = key("The model's config name.")
    model_name_or_path: str = key("Where the model was loaded from.")
    random_init: bool = key("Whether the encoder's weights were randomly initialised.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContextualityResults(AnalysisResults):
    """analysis=contextuality (Ethayarajh 2019): self-similarity, intra-sentence similarity, MEV by layer."""

    KIND: ClassVar[str] = "contextuality"

    weights_sha256: str = key("The SHA-256 of the model's weights.")
    num_layers: int = key("Hidden states of the model (the embedding output included).")
    sentence_source: str = key("The sentences measured: data set and split.")
    sentences: int = key("How many sentences.")
    layers: list[dict[str, Any]] = key("The measures of each layer.")
    seed: int = key("The seed of the samples of words and sentences.")
    mev_centered: bool = key("Whether MEV is that of centred vectors (PCA) rather than Definition 3's.")
    min_contexts: int = key("The contexts a word needs to be sampled.")
    occurrences: int = key("Word occurrences in the sentences measured.")
    words_sampled: int = key("Words sampled for the self-similarity and MEV.")
    words_available: int = key("Words in at least min_contexts contexts.")
    sentences_sampled: int = key("Sentences sampled for the intra-sentence similarity.")
    sentences_available: int = key("Sentences that could be sampled.")
    baseline_occurrences: int = key("Random word occurrences of the anisotropy baselines.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaticPCResults(AnalysisResults):
    """analysis=static_pc (Ethayarajh 2019, §4.3): static embeddings from a layer's first principal component."""

    KIND: ClassVar[str] = "static_pc"

    weights_sha256: str = key("The SHA-256 of the model's weights.")
    layer: int = key("The layer the static embeddings come from.")
    sentence_source: str = key("The sentences measured: data set and split.")
    static_pc: dict[str, Any] = key("The embeddings' words and benchmark scores.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class IsotropyResults(AnalysisResults):
    """analysis=isotropy (Bis et al. 2021): I(W) of the input embeddings or of a layer's word vectors."""

    KIND: ClassVar[str] = "isotropy"

    weights_sha256: str = key("The SHA-256 of the model's weights.")
    layer: int | None = key("The layer measured; null for the input embedding matrix.")
    source: str = key("What was measured.")
    isotropy: dict[str, Number | None] = key("I(W) and the other measures of Table 1, by transform.")
    benchmarks: list[dict[str, Any]] = key("Word-similarity scores, one row per benchmark and measure.")
    benchmark_average: dict[str, Any] = key("The benchmarks' scores averaged.")
    unused_tokens: dict[str, Any] = key("Fig. 3: the unused tokens' cosine by bin.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttentionSimilarityResults(AnalysisResults):
    """analysis=attention_similarity (Zhao et al. 2020, Fig. 7): attention maps of two models compared by head."""

    KIND: ClassVar[str] = "attention_similarity"

    compare_to: str = key("The other model.")
    model_task: str | None = key("The task the model was fine-tuned on (its task.json); null for a pretrained one.")
    compare_to_task: str | None = key("The task the other model was fine-tuned on; null for a pretrained one.")
    sentence_source: str = key("The sentences compared: data set and split.")
    weights_sha256: str = key("The SHA-256 of the model's weights.")
    compare_to_weights_sha256: str = key("The SHA-256 of the other model's weights.")
    sentences: int = key("How many sentences.")
    layers: int = key("Layers compared.")
    heads: int = key("Heads per layer.")
    cosine: list[list[Number]] = key("The cosine of the two models' attention maps, by layer and head.")
    layer_means: list[Number] = key("The cosine averaged over heads, by layer.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NeuronsResults(AnalysisResults, FeaturesKeys):
    """analysis=neurons (Dalvi et al. 2019; Antverg & Belinkov 2022): neuron rankings, ablations, sparse probes."""

    KIND: ClassVar[str] = "neurons"

    task: str = key("The task whose labels the neurons are ranked for.")
    labels: list[str] = key("The task's labels.")
    layer: Any = key("The layer of the neurons.")
    representation: str = key("The representation's label.")
    neurons: int = key("Neurons of the layer.")
    ks: list[int] = key("The numbers of top neurons scored.")
    probe: dict[str, Any] = key("The elastic-net probe's accuracies.")
    rankings: dict[str, list[int]] = key("Each ranking's order of the neurons.")
    ablation: dict[str, Any] = key("Accuracy as the top neurons are ablated, by ranking.")
    retrained: dict[str, Any] = key("Test accuracy of linear probes retrained on the top-k neurons, by ranking (one "
                                    "per k), and their epochs.")
    cross_check: dict[str, Any] = key("The same for MLP-1 probes (the cross-check).")
    majority: dict[str, Any] = key("The accuracies of always answering the most frequent training label.",
                                   optional=True)
    sparse: dict[str, Any] = key("The k-sparse probes of each label: its best neuron and F1 by k.")
    per_label: dict[str, Any] = key("The top neurons of each label, by ranking (when the analysis was asked for "
                                    "them).", optional=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AmnesicResults(AnalysisResults):
    """analysis=amnesic (Elazar et al. 2021): what a model's own task loses when a concept is erased at a layer."""

    KIND: ClassVar[str] = "amnesic"

    weights_sha256: str = key("The SHA-256 of the model's weights.")
    objective: str = key("The model's own output scored: its task, or masked-LM.")
    layer: int = key("The layer erased.")
    concept: str = key("The concept erased.")
    data: str = key("The data scored: data set and split.")
    headline: str = key("The score the report puts first (accuracy, f1, ...).")
    eraser: dict[str, Any] = key("The fitted eraser.")
    scores: dict[str, Any] = key("The scores of each condition (erased, random controls, none).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LensResults(AnalysisResults):
    """analysis=lens (Belrose et al. 2023): the logit lens and the tuned lens of a causal LM, by layer, in bits."""

    KIND: ClassVar[str] = "lens"

    weights_sha256: str = key("The SHA-256 of the model's weights.")
    architecture: str = key("The model's architecture (its Hugging Face class).")
    num_layers: int = key("Hidden states of the model (the embedding output included).")
    vocab_size: int = key("The size of the model's vocabulary.")
    sentence_source: str = key("The sentences read: data set and split.")
    unit: str = key("The unit of every score: bits per token.")
    split: dict[str, Any] = key("The seeded split of the sentences into the tuned lens's training text and the "
                                "held-out text scored: seed, share, counts, the held-out sentences' indices.")
    training: dict[str, Any] = key("How the tuned lens was trained, and its training KL by epoch and layer (bits).")
    layers: list[dict[str, Any]] = key("Per layer: each lens's cross-entropy of the next token and KL from the "
                                       "model's own distribution, in bits per held-out token.")
    model_bits: Number = key("The model's own cross-entropy of the next token, in bits per held-out token.")


# Every kind, by its name: the value of `kind` in a results.json.
KINDS: dict[str, type[Results]] = {kind.KIND: kind for kind in (
    SClassProbeResults, WordProbeResults, StatementProbeResults, TreeProbeResults, FinetuningResults,
    ContextualityResults, StaticPCResults, IsotropyResults, AttentionSimilarityResults, NeuronsResults, AmnesicResults,
    LensResults)}
