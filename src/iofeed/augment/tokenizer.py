"""`Output(tokenizer=)` in the workers: a caption's token ids from the user's callable, seeded per
sample like `transform=` (its seeds from the batch key and the sample's place, on a stream of its
own), its result read as one row of int64 ids; and the rows of a batch padded into one array."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import SampleError, WorkerError
from .batch_key import BatchKey
from .transforms import seed_globals, takes_rng, transform_name

TOKEN_STREAM = 3  # seed stream apart from the crop draws (0), `transform=` (1) and `batch_transform=` (2)
SEEDS_PER_BATCH = 256  # seeds made at once per batch (more when a batch's places, spares included, run past)


class SampleTokenizer:
    """The user's tokenizer in a worker: `fn(text)` (or `fn(text, rng=Generator)`) returning a
    sequence of ints, a 1-D array or tensor, a (1, L) one (open_clip's), or a mapping holding
    `input_ids` (a Hugging Face tokenizer's call). Before each call Python's `random` and numpy's
    global RNG (torch's, if loaded) are seeded with the sample's seed: word `position` of the
    batch key's token stream, made once per batch (a SeedSequence per sample cost 40 us of a
    caption's 60, docs/benchmarks.md), so a sample's ids depend on (seed, epoch, rank, batch,
    place) only, never on the worker."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.name = fn, transform_name(fn)
        self._rng = takes_rng(fn)
        self._key: BatchKey | None = None
        self._seeds: np.ndarray = np.empty(0, np.uint64)

    def seed(self, key: BatchKey, position: int) -> int:
        """The seed of the sample at `position` of batch `key`."""
        if key != self._key or position >= len(self._seeds):
            count = max(SEEDS_PER_BATCH, 2 * position + 1)
            stream = np.random.SeedSequence((key.seed, key.epoch, key.rank, key.batch_no, TOKEN_STREAM))
            self._key, self._seeds = key, stream.generate_state(count, np.uint64)  # a prefix of any longer one
        return int(self._seeds[position])

    def __call__(self, text: str, key: BatchKey, position: int, path: str = "") -> np.ndarray:
        """`text`'s ids (int64, 1-D) with the seed of (key, position). SampleError when the
        tokenizer raises (skipped or raised per on_error); WorkerError for a result that is no
        row of integer ids."""
        seed = self.seed(key, position)
        seed_globals(seed)
        try:
            out = self.fn(text, rng=np.random.default_rng(seed)) if self._rng else self.fn(text)
        except SystemExit as exc:
            raise WorkerError(f"{path}: tokenizer {self.name} called sys.exit({exc.code!r})") from None
        except Exception as exc:  # noqa: BLE001 - the user's code: skipped or raised per on_error
            detail = str(exc).splitlines()[0] if str(exc) else "no message"
            raise SampleError(f"tokenizer {self.name} raised {type(exc).__name__} ({detail})") from None
        return token_row(out, self.name, path)


def token_row(out: Any, name: str, path: str = "") -> np.ndarray:
    """A tokenizer's result as int64 ids (1-D); WorkerError naming `name` when it is none."""
    if isinstance(out, Mapping) or (hasattr(out, "keys") and "input_ids" in out):
        out = out["input_ids"]
    if hasattr(out, "detach"):  # a torch tensor
        out = out.detach().cpu().numpy()
    array = np.asarray(out) if isinstance(out, (np.ndarray, Sequence)) else None
    if array is not None and array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array is None or array.ndim != 1 or not (array.dtype.kind in "iu" or array.size == 0):
        shown = f"{type(out).__name__} {getattr(array, 'shape', '')} {getattr(array, 'dtype', '')}".strip()
        where = f"{path}: " if path else ""
        raise WorkerError(f"{where}tokenizer {name} returned {shown}: return one caption's token ids (a list of "
                          "ints, a 1-D integer array or tensor, or a mapping with 'input_ids')")
    return array.astype(np.int64, copy=False)


def packed(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A batch's rows as two arrays (lengths, ids back to back), how they cross from a worker: two
    objects to pickle, not one per caption."""
    lengths = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
    return lengths, (np.concatenate(rows) if rows else np.empty(0, np.int64)).astype(np.int64, copy=False)


def padded(tokens: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """(ids, lengths) of `packed` rows: int64 (B, longest) with row i's ids first and zeros after,
    and int64 (B,)."""
    lengths, flat = tokens if tokens is not None else (np.empty(0, np.int64), np.empty(0, np.int64))
    ids = np.zeros((len(lengths), int(lengths.max()) if len(lengths) else 0), np.int64)
    ids[np.arange(ids.shape[1]) < lengths[:, None]] = flat
    return ids, lengths
