"""Images stored twice: the same source bytes under several samples, found from each file's
digest (`prepare_file`'s `digest` fact) and reported, never dropped (which copy is right is the
user's call)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Duplicates:
    """Samples whose bytes another sample has too: how many copies beyond the first, how many
    of those sit in another split than the first (train/val leakage) or carry other classes, and
    one example pair."""

    extra_copies: int = 0
    across_splits: int = 0
    other_classes: int = 0
    example: str = ""

    def line(self) -> str:
        """The summary's line (empty when there are none)."""
        if not self.extra_copies:
            return ""
        return (f"{self.extra_copies:,} images with the same bytes as another sample (e.g. {self.example}): "
                f"{self.other_classes:,} with other classes, {self.across_splits:,} in another split; "
                "all kept, remove the copies you do not want")


def find_duplicates(samples: list[tuple[str, str, str, tuple[int, ...]]]) -> Duplicates:
    """Duplicates among `samples`: (digest, name, split, classes) of each stored sample."""
    groups: dict[str, list[tuple[str, str, tuple[int, ...]]]] = defaultdict(list)
    for digest, name, split, classes in samples:
        groups[digest].append((name, split, classes))
    extra = across = other = 0
    example = ""
    for group in groups.values():
        if len(group) < 2:
            continue
        first, rest = min(group), sorted(group)[1:]
        extra += len(rest)
        across += sum(split != first[1] for _, split, _ in rest)
        other += sum(classes != first[2] for _, _, classes in rest)
        example = example or f"{first[0]} = {rest[0][0]}"
    return Duplicates(extra, across, other, example)
