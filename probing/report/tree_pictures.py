"""The pictures of a structural probe's test sentences, drawn as the reference (john-hewitt/structural-probes) draws
them: the gold tree above the words and the predicted one below (distance probe), or each word at its gold and its
predicted depth (depth probe); punctuation grey. `draw_examples` lays out one run's recorded sentences, a panel each,
to one scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probing.report.plots import pyplot, save_figure

# The tree pictures: words laid out by their length in characters, at this font size.
FONT_SIZE = 9
WORD_GAP = 2          # characters between two words
CHAR_INCHES = 0.085   # the width of a character at FONT_SIZE, about
ARC_RISE = 0.35       # an arc's height per word it spans (axis units; the words sit at 0)
ARC_CLEARANCE = 0.8   # arcs start this far above (gold) or below (predicted) the words
# Inches per y unit of a panel (an arc's rise, a level of depth), so that every panel is drawn to one scale, and the
# inches of each panel's title.
UNIT_INCHES = {"distance": 0.2, "depth": 0.45}
TITLE_INCHES = 0.4
PUNCTUATION_COLOUR = "0.6"
# What the pictures of each structure show, under the figure's title.
HOW = {"distance": "gold tree above the words (black), predicted tree below (red); punctuation grey, in neither tree",
       "depth": "each word at its gold depth (black) and its predicted depth (red); punctuation grey"}


def word_centres(words: list[str]) -> tuple[list[float], float]:
    """Each word's centre when the words are laid out left to right by their length (in characters, WORD_GAP apart),
    and the width of the line."""
    centres, start = [], 0.0
    for word in words:
        width = len(word) + WORD_GAP
        centres.append(start + width / 2)
        start += width
    return centres, start


def _word_colour(punctuation: bool, colour: str = "black") -> str:
    return PUNCTUATION_COLOUR if punctuation else colour


def draw_distance_example(ax, example: dict[str, Any]) -> None:
    """The words on a line, the gold tree's edges as arcs above them (black), the predicted tree's below (red), each
    arc as high as the words it spans; punctuation grey (in neither tree)."""
    from matplotlib.patches import Arc

    centres, _ = word_centres(example["words"])
    for word, punctuation, x in zip(example["words"], example["punctuation"], centres):
        ax.text(x, 0.0, word, ha="center", va="center", fontsize=FONT_SIZE, color=_word_colour(punctuation))
    gold, predicted = ({tuple(edge) for edge in example[key]} for key in ("gold_edges", "predicted_edges"))
    for edges, side, colour in ((gold, 1, "black"), (predicted, -1, "red")):
        for i, j in edges:
            ax.add_patch(Arc(((centres[i] + centres[j]) / 2, side * ARC_CLEARANCE), abs(centres[j] - centres[i]),
                             2 * ARC_RISE * abs(j - i), theta1=0 if side > 0 else 180, theta2=180 if side > 0 else 360,
                             color=colour, linewidth=1.0))
    ax.axis("off")
    ax.set_title(f"{len(gold & predicted)} of {len(gold)} gold edges predicted", fontsize=FONT_SIZE - 1, loc="left")


def draw_depth_example(ax, example: dict[str, Any]) -> None:
    """Each word at its gold depth (black) and at its predicted depth (red), joined by a faint line; punctuation
    grey. The depth grows upwards, as in the reference's pictures."""
    from matplotlib.ticker import MaxNLocator

    words, punctuation = example["words"], example["punctuation"]
    gold, predicted = example["gold_depths"], example["predicted_depths"]
    centres, _ = word_centres(words)
    for word, is_punctuation, x, gold_depth, predicted_depth in zip(words, punctuation, centres, gold, predicted):
        ax.plot([x, x], [gold_depth, predicted_depth], color="0.85", linewidth=0.8, zorder=0)
        for depth, colour in ((gold_depth, "black"), (predicted_depth, "red")):
            ax.text(x, depth, word, ha="center", va="center", fontsize=FONT_SIZE,
                    color=_word_colour(is_punctuation, colour))
    ax.set_xticks([])
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=FONT_SIZE - 1)
    ax.set_ylabel("tree depth", fontsize=FONT_SIZE - 1)
    scored = [index for index, is_punctuation in enumerate(punctuation) if not is_punctuation] or range(len(words))
    gold_root, predicted_root = (min(scored, key=depths.__getitem__) for depths in (gold, predicted))
    ax.set_title(f"root: {words[gold_root]}; predicted: {words[predicted_root]}", fontsize=FONT_SIZE - 1, loc="left")


def example_extent(example: dict[str, Any], kind: str) -> tuple[float, float]:
    """The y range of an example's panel: its highest arcs above and below the words, or its depths."""
    if kind == "distance":
        spans = [abs(j - i) for i, j in (*example["gold_edges"], *example["predicted_edges"])]
        reach = ARC_CLEARANCE + ARC_RISE * max(spans, default=1) + 0.2
        return -reach, reach
    depths = [*example["gold_depths"], *example["predicted_depths"]]
    return min([0.0, *depths]) - 0.6, max(depths) + 0.6


def draw_examples(kind: str, examples: list[dict[str, Any]], title: str, path: Path) -> bool:
    """The recorded `examples` of one run whose structure is `kind`, a panel per sentence, under `title` and what the
    pictures show; False when the figure was not written."""
    width = max(word_centres(example["words"])[1] for example in examples)
    extents = [example_extent(example, kind) for example in examples]
    heights = [(high - low) * UNIT_INCHES[kind] + TITLE_INCHES for low, high in extents]
    fig, axes = pyplot().subplots(len(examples), 1, figsize=(max(5.0, CHAR_INCHES * width + 1.0), sum(heights) + 0.8),
                                  gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, example, extent in zip(axes[:, 0], examples, extents):
        (draw_distance_example if kind == "distance" else draw_depth_example)(ax, example)
        ax.set_xlim(0.0, width)
        ax.set_ylim(*extent)
    fig.suptitle(f"{title}\n{HOW[kind]}", fontsize=FONT_SIZE)
    return save_figure(fig, path)
