"""The `folder` source: one subfolder per class (Caltech-256 and ImageNet train layouts)."""
from __future__ import annotations

from ...sources.folder_scan import scan_folder
from .base import SourceOptions, SourceScan
from .label_targets import Targets


def scan(src: str, options: SourceOptions) -> SourceScan:
    """The images of a class-folder tree, labelled by their top-level folder."""
    folder = scan_folder(src)
    result = SourceScan(root=str(folder.root), kind="folder", targets=Targets(names=folder.class_names),
                        rejected=list(folder.rejected), class_dirs=folder.class_dirs,
                        empty_classes=folder.empty_classes)
    for rel, label in zip(folder.files, folder.labels):
        result.add(str(folder.root / rel), rel, label)
    return result
