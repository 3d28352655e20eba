"""The stall at each epoch boundary of a tf.data input, the way Keras iterates (a new iterator per
epoch): iofeed's tf adapter against a native tf.data pipeline on the same split's images.

    python scripts/epoch_boundary.py data/c256.iof --epochs 5

For each input it prints, per epoch boundary, the gap between the last batch of one epoch and the
first of the next, beside the median gap between batches inside an epoch (seconds). The native
pipeline reads the same samples' bytes from the dataset's shards (decode_jpeg, resize, batch,
prefetch: what a careful tf.data user writes), so both decode the same stored JPEGs.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np


def gaps(dataset, epochs: int) -> tuple[list[float], list[float]]:
    """(boundary gaps, gaps inside epochs) over `epochs` iterations of `dataset`, one iterator each."""
    boundary, inside = [], []
    last = None
    for _ in range(epochs):
        first = True
        for _batch in dataset:
            now = time.perf_counter()
            if last is not None:
                (boundary if first else inside).append(now - last)
            first, last = False, now
    return boundary, inside


def native(path: Path, split: str, batch_size: int, size: int):
    """A plain tf.data pipeline over the split's stored JPEGs, read from the shards by offset."""
    import tensorflow as tf

    from iofeed.sources.samples import open_source

    source = open_source(path, split)
    blobs = []
    handles = {}
    for k in range(len(source)):
        name = source.files[source.file_id[k]].decode()
        f = handles.setdefault(name, open(name, "rb"))  # noqa: SIM115 - closed below
        f.seek(int(source.offset[k]))
        blobs.append(f.read(int(source.size[k])))
    for f in handles.values():
        f.close()
    labels = source.label.astype(np.int64)

    def decode(blob, label):
        image = tf.image.resize(tf.io.decode_jpeg(blob, channels=3), (size, size))
        return image, label

    return (tf.data.Dataset.from_tensor_slices((blobs, labels))
            .shuffle(len(blobs), seed=0, reshuffle_each_iteration=True)
            .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="val")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args()

    import iofeed

    inputs = {
        "iofeed (tf adapter)": lambda: iofeed.loader(args.dataset, split=args.split, batch_size=args.batch_size,
                                                     image_size=args.image_size, framework="tf", augment=True),
        "native tf.data": lambda: native(args.dataset, args.split, args.batch_size, args.image_size),
    }
    for name, make in inputs.items():
        dataset = make()
        boundary, inside = gaps(dataset, args.epochs)
        print(f"{name}: epoch boundaries {', '.join(f'{g:.3f}' for g in boundary)} s; "
              f"inside epochs median {statistics.median(inside):.3f} s per batch")
        loader = getattr(dataset, "iofeed_loader", None)
        if loader is not None:
            print(f"  batches started in the previous epoch: {getattr(loader.engine, 'started_ahead', None)}")
            loader.close()


main()
