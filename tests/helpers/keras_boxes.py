"""`python -m helpers.keras_boxes DATASET` with KERAS_BACKEND set: framework="keras" with box
targets, printed as one JSON line (the targets' spec and a batch's shapes, or the refusal)."""
from __future__ import annotations

import json
import sys

import iofeed
from iofeed.errors import OptionError


def main(dataset: str) -> None:
    try:
        data = iofeed.loader(dataset, batch_size=4, framework="keras", image_size=64,
                             output=iofeed.Output(target="boxes"), workers=1)
    except OptionError as exc:
        print(json.dumps({"refused": str(exc)}))
        return
    images, targets = next(iter(data))
    spec = data.element_spec[1]
    print(json.dumps({"spec": {key: type(value).__name__ for key, value in spec.items()},
                      "images": list(images.shape), "boxes": targets["boxes"].shape.as_list(),
                      "rows": targets["boxes"].nrows().numpy().item()}))
    data.iofeed_loader.close()


if __name__ == "__main__":
    main(sys.argv[1])
