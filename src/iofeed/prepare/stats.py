"""The manifest's statistics of a preprocess input: what was found, accepted and rejected, the
images' modes, formats and sizes, and the bytes stored per encoding."""
from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..format.table import ENCODINGS
from ..sources.folder_scan import Rejection, display_path, reason_kind
from .sources.base import SourceScan


def source_stats(scan: SourceScan, facts: list[dict[str, Any]], rejected: list[Rejection]) -> dict[str, Any]:
    """Statistics of the input a user would want to see in `iofeed inspect`."""
    modes = Counter(f["mode_in"] for f in facts)
    widths = np.array([f["width_in"] for f in facts] or [0])
    heights = np.array([f["height_in"] for f in facts] or [0])
    return {
        "path": display_path(str(scan.root)),
        "kind": scan.kind,
        "found": len(scan) + len(scan.rejected),
        "accepted": len(facts),
        "rejected": len(rejected),
        "rejected_by_reason": dict(Counter(reason_kind(r.reason) for r in rejected)),
        "empty_classes": scan.empty_classes,
        "notes": scan.notes,
        "bytes_in": int(sum(f["bytes_in"] for f in facts)),
        "modes": dict(modes),
        "formats": dict(Counter(f["format_in"] for f in facts)),
        "progressive": sum(f["progressive_in"] for f in facts),
        "exif_rotated": sum(f["oriented"] for f in facts),
        "kept_original_bytes": sum(f["kept_original"] for f in facts),
        "mean_size": [float(widths.mean()), float(heights.mean())],
        "median_size": [float(np.median(widths)), float(np.median(heights))],
        "max_size": [int(widths.max()), int(heights.max())],
        "stored": storage_stats(facts),
    }


def storage_stats(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """Samples and bytes stored per encoding, and the estimated size of the all-JPEG form."""
    stored = {enc: [f for f in facts if f["encoding"] == enc] for enc in ENCODINGS}
    raw_bytes = sum(f["stored_bytes"] for f in stored["raw"])
    sampled = [f for f in stored["raw"] if "jpeg_bytes" in f]
    ratio = sum(f["jpeg_bytes"] for f in sampled) / max(sum(f["stored_bytes"] for f in sampled), 1)
    jpeg_bytes = sum(f["stored_bytes"] for f in stored["jpeg"])
    return {
        "samples": {enc: len(group) for enc, group in stored.items()},
        "bytes": {"jpeg": jpeg_bytes, "raw": raw_bytes},
        "as_jpeg_bytes_estimate": int(jpeg_bytes + raw_bytes * ratio),
    }
