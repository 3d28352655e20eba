"""The worker side of the `workers` engine: a task (one batch into one slot), its report, and the
loop each worker process runs."""
from __future__ import annotations

import mmap
import signal
import sys
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from ...augment.batch_key import BatchKey
from ...augment.target_transforms import TargetTransform
from ...augment.tokenizer import SampleTokenizer, packed
from ...augment.transforms import SampleTransform
from ...errors import IofeedError, SampleError, is_out_of_memory, out_of_memory
from ...format.captions import caption_at
from ...format.files import raise_open_limit
from ...image.boxes import Augment
from ...runtime.processes import next_message
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource
from ..base import sample_failure
from ..refill import fill
from .decode import load_augmented
from .slots import Layout
from .transformed_targets import TransformedTargetLayout
from .worker_status import IDLE, READING, TRANSFORMING, finish_task, mark, worker_view


@dataclass(frozen=True)
class Task:
    generation: int
    batch_no: int
    slot: int
    indices: np.ndarray
    key: BatchKey
    spare: np.ndarray  # samples that may take skipped ones' places (`refill.spares`)


@dataclass(frozen=True)
class Done:
    generation: int
    batch_no: int
    slot: int
    delivered: np.ndarray
    skipped: list[tuple[int, str]]
    error: str | None = None
    sample_error: bool = False
    kind: str = ""  # the IofeedError subclass to raise (a dataset replaced, out of descriptors), else WorkerError
    busy_seconds: float = 0.0
    stale: bool = False  # left undone: its pass was abandoned
    transform_seconds: float = 0.0  # CPU time in the user's transform
    transform_wall_seconds: float = 0.0  # wall time in the user's transform
    cpu_seconds: float = 0.0  # CPU time of the whole task
    refilled: int = 0  # skipped samples whose places spares took
    exhausted: bool = False  # a skipped sample's place stayed empty: all `spares` were tried
    spares: int = 0  # how many spares the task had
    tokens: tuple[np.ndarray, np.ndarray] | None = None  # Output(tokenizer=): (lengths, ids back to back), in order


def worker_main(
    block: mmap.mmap, stale: mmap.mmap, layout: Layout, source: SampleSource, augment: Augment, on_error: str,
    conn: Connection, transform: SampleTransform | None = None, progress: mmap.mmap | None = None,
    tokenizer: SampleTokenizer | None = None,
) -> None:
    """Worker loop: take a task, decode its samples into the slot, report. Exits with its parent.
    `progress` says which sample it is on, and in which step (for the consumer if it dies), and
    how far it got (for the watchdog)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "torch" in sys.modules:  # a torchvision transform: one process per core already, no intra-op threads
        sys.modules["torch"].set_num_threads(1)
    raise_open_limit(2 * len(source.files) + 64)  # every shard open (and mapped) at once, and its own
    payload, labels = layout.views(memoryview(block))
    stale_below = np.frombuffer(stale, np.int64, 1)
    now = worker_view(progress)
    mark(now, -1, IDLE)  # started: watched from now on
    reader = SampleReader(source)
    try:
        while True:
            task = next_message(conn)
            if task is None:  # stop, or the consumer is gone
                return
            started, cpu = time.perf_counter(), time.process_time()
            reader.begin_batch(task.key.epoch)
            transformed = (transform.cpu_seconds, transform.wall_seconds) if transform else (0.0, 0.0)
            done = run_task(task, layout, reader, source, augment, on_error, layout.slot(payload, task.slot),
                            labels[task.slot], stale_below, transform, now, tokenizer)
            finish_task(now)
            reader.end_batch()
            try:
                conn.send(replace(done, busy_seconds=time.perf_counter() - started,
                                  cpu_seconds=time.process_time() - cpu,
                                  transform_seconds=(transform.cpu_seconds - transformed[0]) if transform else 0.0,
                                  transform_wall_seconds=(transform.wall_seconds - transformed[1]) if transform
                                  else 0.0))
            except OSError:  # BrokenPipeError: the consumer is gone (killed, SIGTERM): nothing to report to
                return
    finally:
        del payload, labels, stale_below, now
        reader.close()


def run_task(
    task: Task, layout: Layout, reader: SampleReader, source: SampleSource, augment: Augment, on_error: str,
    slot_payload: Any, labels: np.ndarray, stale_below: np.ndarray, transform: SampleTransform | None = None,
    now: np.ndarray | None = None, tokenizer: SampleTokenizer | None = None,
) -> Done:
    """Fill one slot, a skipped sample's place taken by a spare (`refill.fill`); failures become
    `skipped` entries or an error report, never an exception. A task of a pass the consumer left
    (generation below `stale_below[0]`) stops at its next sample. With a `transform`, each sample
    is cropped into a scratch image, transformed, then written. `now` (`progress.worker_view`)
    records which sample is under way, and in which step. With a `tokenizer`, each sample's caption
    is tokenized once its image is in (seeded by (key, position) as a transform is)."""
    rng = task.key.rng()
    # with a transform, the scratch image each sample is cropped into before it is transformed
    transforming = None if transform is None else (transform, np.empty((augment.size, augment.size, 3), np.uint8))
    now = worker_view(None) if now is None else now
    tokens: dict[int, np.ndarray] = {}  # place in the slot -> the caption's ids

    def stop(error: str | None = None, **more: Any) -> _Stop:
        return _Stop(Done(task.generation, task.batch_no, task.slot, np.empty(0, np.int64), [], error, **more))

    def load(k: int, position: int, index: int, spare: bool) -> str | None:
        if task.generation < stale_below[0]:
            raise stop(stale=True)
        try:
            mark(now, index, READING)
            if transforming is None:
                layout.write(slot_payload, k, reader, source, index, augment, rng)
            elif isinstance(layout, TransformedTargetLayout):
                image, targets, dropped = layout.prepared(reader, source, index, augment, rng)
                mark(now, index, TRANSFORMING)
                assert isinstance(transform, TargetTransform), "made with the layout (`make_worker_engine`)"
                path = source.path_of(index)
                layout.put(slot_payload, k, *transform.with_targets(image, targets, task.key, position, path),
                           len(targets.labels), dropped, path)
            else:
                apply, scratch = transforming
                load_augmented(reader, source, index, augment, rng, scratch)
                mark(now, index, TRANSFORMING)
                slot_payload[k] = apply(scratch, task.key, position, source.path_of(index))
            if tokenizer is not None:
                assert source.captions is not None, "Output(tokenizer=) hands the captions to the workers"
                mark(now, index, TRANSFORMING)
                tokens[k] = tokenizer(caption_at(*source.captions, index), task.key, position, source.path_of(index))
        except SampleError as exc:
            failure = None if spare else sample_failure(on_error, source.path_of(index), str(exc))
            if failure is not None:
                raise stop(str(failure), sample_error=True) from None
            return str(exc)
        except IofeedError as exc:  # already one line naming the file and the fix
            raise stop(str(exc), kind=type(exc).__name__) from None
        except KeyboardInterrupt:  # SIGINT is ignored here (worker_main): the transform raised it itself
            what = f"transform {transform.name}" if transform is not None else "reading it"
            raise stop(f"{source.path_of(index)}: {what} raised KeyboardInterrupt in a loader worker: a transform "
                       "must return the image or raise an exception (Ctrl-C stops the main process, not a "
                       "worker)") from None
        except Exception as exc:  # noqa: BLE001 - reported to the consumer in one line
            raise stop(out_of_memory(f"in a loader worker while reading {source.path_of(index)} ({_one_line(exc)})")
                       if is_out_of_memory(exc) else f"{source.path_of(index)}: {_one_line(exc)}") from None
        labels[k] = source.label[index]
        return None

    try:
        filled = fill(task.indices, task.spare, load, source.part_of)
    except _Stop as stopped:
        return stopped.done
    return Done(task.generation, task.batch_no, task.slot, np.asarray(filled.delivered, np.int64), filled.skipped,
                refilled=filled.refilled, exhausted=filled.exhausted, spares=len(task.spare),
                tokens=packed([tokens[k] for k in range(len(filled.delivered))]) if tokenizer is not None else None)


class _Stop(Exception):
    """Ends a task early with its report."""

    def __init__(self, done: Done) -> None:
        self.done = done


def _one_line(exc: BaseException) -> str:
    """An unexpected worker exception as one line: what, and where in iofeed's code it was raised."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" (in {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})" if frame else ""
    text = " ".join(str(exc).split()) or "no detail"
    return f"{type(exc).__name__}: {text}{where}"
