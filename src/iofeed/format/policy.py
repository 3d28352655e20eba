"""How images are stored by `preprocess`: shorter side, JPEG quality, and raw or JPEG."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import OptionError

FORMATS = ("jpeg", "raw", "mixed")
# a source kind's shorter side when none is given (detection and segmentation: 800); else DEFAULT_SIDE
SOURCE_SIDES = {"coco": 800, "yolo": 800, "wds-boxes": 800, "segmentation": 800}
DEFAULT_SIDE = 256


@dataclass(frozen=True)
class ImagePolicy:
    """How images are stored: shorter side, JPEG quality, and the format.

    `format` "jpeg" stores baseline JPEGs; "raw" stores uint8 RGB pixels (decode-free, several
    times larger); "mixed" stores raw the images of at most `raw_max_pixels` pixels, JPEG the rest.
    """

    shorter_side: int | None = DEFAULT_SIDE  # None: the source kind's (`SOURCE_SIDES`)
    quality: int = 90
    format: str = "jpeg"
    raw_max_pixels: int = 256 * 320

    def check(self) -> None:
        """Raise OptionError for values that make no sense."""
        if self.shorter_side is not None and self.shorter_side < 8:
            raise OptionError(f"--size must be at least 8 pixels, got {self.shorter_side}")
        if not 1 <= self.quality <= 100:
            raise OptionError(f"--quality must be between 1 and 100, got {self.quality}")
        if self.format not in FORMATS:
            raise OptionError(f"--format {self.format!r} is not one of {', '.join(FORMATS)}")
        if self.raw_max_pixels < 1:
            raise OptionError(f"--raw-max-pixels must be >= 1, got {self.raw_max_pixels}")

    @property
    def side(self) -> int:
        """The shorter side to store (`for_source` fixes it first; unfixed, the classification default)."""
        return self.shorter_side if self.shorter_side is not None else DEFAULT_SIDE

    def for_source(self, kind: str) -> ImagePolicy:
        """This policy with its shorter side fixed: the one given, else the source kind's."""
        if self.shorter_side is not None:
            return self
        return replace(self, shorter_side=SOURCE_SIDES.get(kind, DEFAULT_SIDE))

    def stores_raw(self, width: int, height: int) -> bool:
        """Whether an image of this stored size is kept as raw pixels."""
        return self.format == "raw" or (self.format == "mixed" and width * height <= self.raw_max_pixels)
