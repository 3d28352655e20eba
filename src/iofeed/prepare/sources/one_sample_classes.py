"""The summary's note when most classes have one sample: short captions ("Red Sports Car", as
img2dataset writes beside each `jpg`) read as class names make one class per caption, and the
caption rule (sentence-like texts, `webdataset.refuse_captions`) lets them through. A few-shot
dataset (one face per person) looks the same, so this is a note, not a refusal: it names the
source and says how to take the texts either way."""
from __future__ import annotations

from collections import Counter

from ...sources.folder_scan import display_path
from .label_targets import Resolved

# how to take the texts as captions (no class), per source kind; --label-names takes them as names
AS_CAPTIONS = {
    "webdataset": "--target text (each caption kept as the sample's target, no classes; or --label-column json: "
                  "each json kept as the sample's extra)",
    "labels": "write them in a column other than the label (kept as each sample's extra)",
    "parquet": "--label-column naming the class column (the other columns are kept as the sample's extra)",
    "hf": "--label-column naming the class column (the other columns are kept as the sample's extra)",
}


def one_sample_note(kind: str, resolved: Resolved, names: list[str], src: str, label_names: bool) -> str:
    """The note (empty when none is due): class names (not indices, not class folders, not given
    by `--label-names`), at least 2, more than half of them held by one sample only."""
    if kind not in AS_CAPTIONS or label_names or len(resolved.names) < 2:
        return ""
    if resolved.names == [str(i) for i in range(len(resolved.names))]:
        return ""  # class indices: a sparse one is no caption
    counts = Counter(c for classes in resolved.classes for c in classes)
    single = {c for c in range(len(resolved.names)) if counts[c] == 1}
    if 2 * len(single) <= len(resolved.names):
        return ""
    first = next(i for i, classes in enumerate(resolved.classes) if single & set(classes))
    shown = resolved.names[next(c for c in resolved.classes[first] if c in single)]
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return (f"{len(single):,} of {len(resolved.names):,} classes in {src} have one sample (e.g. "
            f"{display_path(names[first])}: {shown!r}): if the texts are captions, not classes, "
            f"{AS_CAPTIONS[kind]}; if they are class names, --label-names says so")
