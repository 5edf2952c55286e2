"""Number comparisons written in words, generated as Marks & Tegmark (2024) generate their larger_than and
smaller_than datasets ("Fifty-one is larger than fifty-two.", label 0): statements the project may ship, since it
makes them itself. `python -m probing.data.number_statements OUT.csv` writes the bundled sample
(probing/resources/statements/number_comparisons.csv)."""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
RELATIONS = {"larger": lambda a, b: a > b, "smaller": lambda a, b: a < b}
COLUMNS = ("statement", "label", "n1", "n2", "relation")


def number_word(n: int) -> str:
    """0..99 in English words, hyphenated as the paper writes them: 51 -> "fifty-one", 60 -> "sixty"."""
    if not 0 <= n < 100:
        raise ValueError(f"number words are written for 0..99, got {n}")
    if n < 20:
        return UNITS[n]
    tens, units = divmod(n, 10)
    return TENS[tens] + (f"-{UNITS[units]}" if units else "")


def statement(a: int, b: int, relation: str) -> str:
    """"Fifty-one is larger than fifty-two." (`relation`: larger or smaller)."""
    first = number_word(a)
    return f"{first[0].upper()}{first[1:]} is {relation} than {number_word(b)}."


def comparisons(count: int, seed: int = 0, low: int = 51, high: int = 99) -> list[dict[str, object]]:
    """`count` statements per relation (larger, smaller), half of them true, over distinct ordered pairs of numbers
    in [low, high] drawn with random.Random(seed); label 1 for a true statement, 0 for a false one. Rows are shuffled
    (by the same seed) so that no split or batch follows the pairs' order."""
    pairs = [(a, b) for a in range(low, high + 1) for b in range(low, high + 1) if a != b]
    rng = random.Random(seed)
    rows = []
    for relation, holds in RELATIONS.items():
        true = [pair for pair in pairs if holds(*pair)]
        false = [pair for pair in pairs if not holds(*pair)]
        if count // 2 > len(true) or count - count // 2 > len(false):
            raise ValueError(f"{count} statements need more distinct pairs than [{low}, {high}] has")
        chosen = rng.sample(true, count // 2) + rng.sample(false, count - count // 2)
        rows += [{"statement": statement(a, b, relation), "label": int(holds(a, b)), "n1": a, "n2": b,
                  "relation": relation} for a, b in chosen]
    rng.shuffle(rows)
    return rows


def write_csv(path: str | Path, rows: list[dict[str, object]]) -> None:
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    write_csv(sys.argv[1], comparisons(count=300, seed=0))
