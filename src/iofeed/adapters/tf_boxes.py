"""Box targets for TensorFlow (framework="tf", and Keras on TensorFlow): a dict of
`boxes` `tf.RaggedTensor` (B, None, 4) float32 xyxy in output pixels and `labels` (B, None) int64,
made from the batch's flat arrays and offsets in one step each (row splits, no per-box object),
plus `masks` (B, H, W) uint8 instance-id maps (box k of an image is id k + 1) and, for
letterboxed evaluation batches, `scale` (B, 2) (x, y: output pixels per annotated pixel)."""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from .box_batches import BoxBatch


def as_tf(boxes: BoxBatch) -> dict[str, Any]:
    """The batch's targets as TensorFlow values (`box_signature`'s)."""
    splits = tf.constant(boxes.moved.offsets, tf.int64)
    ragged = tf.RaggedTensor.from_row_splits  # type: ignore[attr-defined]  # missing from types-tensorflow
    out: dict[str, Any] = {"boxes": ragged(boxes.moved.boxes.reshape(-1, 4), splits, validate=False),
                           "labels": ragged(boxes.labels, splits, validate=False)}
    masks = boxes.id_maps()
    if masks is not None:
        out["masks"] = tf.constant(masks)
    if boxes.scale is not None:
        out["scale"] = tf.constant(boxes.scale)
    return out


def box_signature(canvas: tuple[int, int], masks: bool, scale: bool) -> dict[str, Any]:
    """The `tf.data` element spec of `as_tf`'s dict for output images of `canvas` (height, width)."""
    out: dict[str, Any] = {
        "boxes": tf.RaggedTensorSpec((None, None, 4), tf.float32, ragged_rank=1, row_splits_dtype=tf.int64),
        "labels": tf.RaggedTensorSpec((None, None), tf.int64, ragged_rank=1, row_splits_dtype=tf.int64)}
    if masks:
        out["masks"] = tf.TensorSpec((None, *canvas), tf.uint8)
    if scale:
        out["scale"] = tf.TensorSpec((None, 2), tf.float32)
    return out
