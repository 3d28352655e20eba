"""A uint8 id map (instance ids or semantic class ids) stored as runs along each row, so that a
worker cutting a nearest-neighbour crop expands only the rows the resize samples, not the whole
map as a PNG decode must (docs/decisions/0165-*).

The member (`mask.rows`) is, little-endian: uint32 height, width, run count; uint32 (height + 1)
index of each row's first run (the last is the run count); uint16 run lengths; uint8 run values.
Each row's runs cover its width exactly; a run longer than 65535 is stored in pieces."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SampleError

ROWS_MEMBER = "mask.rows"
_LONGEST = 0xFFFF  # a uint16 run length
_HEADER = 12


def encode_rows(ids: np.ndarray) -> bytes:
    """`ids` (H, W) uint8 as row runs (the layout above)."""
    ids = np.ascontiguousarray(ids, np.uint8)
    height, width = ids.shape
    flat = ids.ravel()
    new = np.ones(flat.size, bool)
    new[1:] = flat[1:] != flat[:-1]
    new[::width] = True  # every row starts a run
    starts = np.flatnonzero(new)
    lengths = np.diff(np.append(starts, flat.size))
    values = flat[starts]
    rows = starts // width
    pieces = -(-lengths // _LONGEST)  # a wide image's long run in uint16 pieces
    if (pieces > 1).any():
        run = np.repeat(np.arange(len(lengths)), pieces)
        piece = np.arange(len(run)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        lengths = np.minimum(lengths[run] - piece * _LONGEST, _LONGEST)
        values, rows = values[run], rows[run]
    first = np.searchsorted(rows, np.arange(height + 1)).astype("<u4")
    header = np.asarray([height, width, len(lengths)], "<u4")
    return b"".join([header.tobytes(), first.tobytes(), lengths.astype("<u2").tobytes(),
                     values.astype(np.uint8).tobytes()])


@dataclass(frozen=True)
class RowRuns:
    """A stored id map's runs, checked, not expanded."""

    first: np.ndarray  # (height + 1,) index of each row's first run
    lengths: np.ndarray  # uint16 (runs,)
    values: np.ndarray  # uint8 (runs,)
    width: int

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.first) - 1, self.width

    def sample(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """`map[rows][:, cols]` as (len(rows), len(cols)) uint8, for `cols` in ascending order: each
        run of the rows from the first to the last wanted is repeated once per column it holds
        (never a whole row expanded), then the wanted rows taken."""
        low, high = int(rows.min()), int(rows.max()) + 1
        begin, end, covered = self._checked(low, high)
        lengths = self.lengths[begin:end]
        per_row: np.ndarray = np.diff(self.first[low:high + 1].astype(np.int64))
        row_of = np.repeat(np.arange(high - low, dtype=np.int64), per_row)
        stop = covered - row_of * self.width  # each run's end within its row
        held: np.ndarray = np.searchsorted(cols, stop) - np.searchsorted(cols, stop - lengths)  # in [start, stop)
        window = np.repeat(self.values[begin:end], held).reshape(high - low, len(cols))
        out: np.ndarray = np.take(window, rows - low, axis=0)
        return out

    def window(self, top: int, bottom: int) -> np.ndarray:
        """Rows `top` to `bottom` (exclusive) as (bottom - top, width) uint8."""
        begin, end, _ = self._checked(top, bottom)
        expanded: np.ndarray = np.repeat(self.values[begin:end], self.lengths[begin:end])
        return expanded.reshape(bottom - top, self.width)

    def expand(self) -> np.ndarray:
        """The whole map (H, W) uint8."""
        return self.window(0, self.shape[0])

    def _checked(self, top: int, bottom: int) -> tuple[int, int, np.ndarray]:
        """Rows `top`..`bottom - 1`'s first and past-last run and their runs' cumulative lengths;
        SampleError when the runs do not cover each row exactly (a damaged member)."""
        ends = self.first[top:bottom + 1].astype(np.int64)
        begin, end = int(ends[0]), int(ends[-1])
        covered = np.cumsum(self.lengths[begin:end], dtype=np.int64)
        rows = np.arange(1, bottom - top + 1, dtype=np.int64) * self.width
        if (np.diff(ends) < 1).any() or not np.array_equal(covered[ends[1:] - begin - 1], rows):
            raise SampleError(f"instance mask's row runs do not cover its rows {top}-{bottom - 1} "
                              f"({self.width} pixels each)")
        return begin, end, covered


def decode_rows(data: bytes, width: int, height: int) -> RowRuns:
    """A stored row-run map of the image's size; SampleError when its header is malformed or of another
    size (each row's runs are checked when it is expanded)."""
    if len(data) < _HEADER:
        raise SampleError(f"instance mask is {len(data)} bytes, too short for its row runs")
    stored_h, stored_w, runs = (int(v) for v in np.frombuffer(data, "<u4", 3))
    if (stored_w, stored_h) != (width, height):
        raise SampleError(f"instance mask is {stored_w}x{stored_h}, the image {width}x{height}")
    need = _HEADER + 4 * (height + 1) + 3 * runs
    if len(data) != need:
        raise SampleError(f"instance mask is {len(data)} bytes, its row runs need {need}")
    first = np.frombuffer(data, "<u4", height + 1, _HEADER)
    lengths = np.frombuffer(data, "<u2", runs, _HEADER + 4 * (height + 1))
    values = np.frombuffer(data, np.uint8, runs, _HEADER + 4 * (height + 1) + 2 * runs)
    if first[0] != 0 or first[-1] != runs:
        raise SampleError(f"instance mask's row index spans runs {first[0]}-{first[-1]}, it holds {runs}")
    return RowRuns(first, lengths, values, width)
