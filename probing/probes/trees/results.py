"""What a tree probe run records beside its scores: the paper's LINEAR baseline on the same sentences, scored by the
same metrics (Hewitt & Manning 2019 §3: each word attached to the next, a chain; a word's depth its position), and a
few test sentences' gold and predicted trees, which the report draws (the reference's `image_examples`)."""

from __future__ import annotations

from typing import Any

import torch

from probing.probes.trees.data import SentenceSplit
from probing.probes.trees.metrics import TreeMetrics, linear_baseline, spanning_tree_edges

EXAMPLES = 3  # test sentences drawn by the report
EXAMPLE_LENGTHS = (6, 20)  # long enough to show a tree, short enough to read one


def linear_baseline_scores(split: SentenceSplit, kind: str) -> dict[str, float | int | None]:
    """The LINEAR baseline's scores on the sentences of `split` (those the probe is scored on); None where a score is
    undefined on them, as the probe's."""
    metrics = TreeMetrics(kind)
    for index in range(len(split)):
        batch = split[[index]]
        length = int(batch["lengths"][0])
        predictions = torch.as_tensor(linear_baseline(length, kind), dtype=torch.float32)[None]
        metrics.update(predictions, batch["gold"], batch["lengths"], batch["punctuation"])
    return metrics.compute()


@torch.no_grad()
def tree_examples(module: Any, split: SentenceSplit, sentences: tuple[tuple[str, ...], ...], kind: str,
                  count: int = EXAMPLES) -> list[dict[str, Any]]:
    """The first `count` sentences of `split` of a readable length, with their words (`sentences`: those of the
    split's `TreeSplit`): for a distance probe the gold and predicted spanning trees (undirected edges between the
    non-punctuation words, as UUAS scores them), for a depth probe the gold and predicted depths."""
    module.eval()
    examples = []
    for index in range(len(split)):
        length = split.lengths[index]
        if not EXAMPLE_LENGTHS[0] <= length <= EXAMPLE_LENGTHS[1]:
            continue
        batch = split[[index]]
        predicted = module.probes(batch["features"].to(module.device))[0].float().cpu().numpy()
        gold, keep = batch["gold"][0].numpy(), ~batch["punctuation"][0].numpy()
        example: dict[str, Any] = {"words": list(sentences[split.sentence_ids[index]]),
                                   "punctuation": (~keep).tolist()}
        if kind == "distance":
            example |= {"gold_edges": sorted(spanning_tree_edges(gold, keep)),
                        "predicted_edges": sorted(spanning_tree_edges(predicted, keep))}
        else:
            example |= {"gold_depths": gold.tolist(), "predicted_depths": predicted.tolist()}
        examples.append(example)
        if len(examples) == count:
            break
    return examples
