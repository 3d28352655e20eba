"""`EpochPosition`: where a loader stands in its epochs — the epoch, the batches delivered, a resumed
epoch's samples and batches done before, where a pass left early began — and the arithmetic on it:
`len()`, spilling, passes begun and begun again, state progress. Plain numbers and an `OrderSpec`."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..sources.dealing import EpochBatches
from ..sources.order import OrderSpec
from .resume import Progress


@dataclass
class Pass:
    """One pass: its epoch, the batch it began at, its batches (entries before a resume empty, see
    `OrderSpec.batches`), the next epoch's (which the engine may start early), the batches of
    the epoch delivered so far, counted by the pass itself, and the position's `moves` it began at."""

    epoch: int
    start: int
    batches: EpochBatches = field(repr=False)
    following: EpochBatches = field(repr=False)
    position: int = 0
    moves: int = 0


@dataclass
class EpochPosition:
    """The position of one loader (one rank) in its epochs. `position` counts the batches of
    `epoch` delivered, those before a resume included; a resumed epoch had `done` samples of its
    global order done by a run that counted `first` batches per rank (zero for an epoch begun
    here). `pass_start` is where the pass under way began: set from `begin` until the epoch
    completes or the position is moved, so that a pass left before its end is begun again.
    `moves` counts `set_epoch` and `resume` calls: a pass begun before the latest one delivers
    its batches without moving the position, which stays where the caller put it."""

    epoch: int = 0
    position: int = 0
    done: int = 0
    first: int = 0
    pass_start: tuple[int, int, int, int] | None = None
    moves: int = 0

    def length(self, order: OrderSpec) -> int:
        """Batches the epoch holds at most: a resumed one may hold more than `len(order)` (those
        counted before the resume, and the rest cut to this order's world and batch size)."""
        if not self.done:
            return len(order)
        return max(len(order), self.first + order.batch_count(self.done))

    @property
    def in_resumed_pass(self) -> bool:
        """A pass of a resumed epoch began and has not completed."""
        return self.pass_start is not None and self.done > 0

    def spilling(self, order: OrderSpec) -> bool:
        """Whether a resumed epoch longer than `len(order)` was left past `len(order)` batches, where a
        consumer that took `len()` before the resume (Lightning) stops: the next pass continues it."""
        return self.in_resumed_pass and self.length(order) > len(order) and self.position >= len(order)

    @property
    def under_way(self) -> bool:
        """Batches were delivered since the epoch began or resumed (its dealing is fixed from then)."""
        return self.position > self.first

    def set_epoch(self, epoch: int) -> None:
        """`epoch` from its beginning, also when called during a pass (whose batches then no
        longer count here: see `advance`)."""
        self._start(epoch)
        self.moves += 1

    def _start(self, epoch: int) -> None:
        """`epoch` from its beginning, as the position moves itself (an epoch completed)."""
        self.epoch, self.position, self.done, self.first = int(epoch), 0, 0, 0
        self.pass_start = None

    def rewind(self, order: OrderSpec) -> bool:
        """Back to where a pass left before its end began, to begin it again (as torch's DataLoader
        begins a new pass at each `iter()`), unless it is spilling; whether it went back."""
        if self.pass_start is None or self.spilling(order):
            return False
        self.epoch, self.done, self.first, self.position = self.pass_start
        return True

    def continue_next(self) -> None:
        """The next pass continues from here, rather than beginning the pass under way again."""
        self.pass_start = None

    def begin(self, order: OrderSpec) -> Pass:
        """A pass from here: its batches under `order`, and `pass_start` set to here."""
        self.pass_start = (self.epoch, self.done, self.first, self.position)
        return Pass(self.epoch, self.position, order.batches(self.epoch, self.done, self.first),
                    order.batches(self.epoch + 1), self.position, self.moves)

    def _moved_since(self, run: Pass) -> bool:
        """`set_epoch` or `resume` was called after `run` began: the position is the caller's."""
        return run.moves != self.moves

    def advance(self, run: Pass) -> bool:
        """`run` delivered its next batch; whether that was the epoch's last (`complete` then). The
        pass counts its own batches; a position moved meanwhile (`set_epoch`, `resume`) stays where
        it was put: a state saved then resumes there, and the next pass begins there."""
        run.position += 1
        if not self._moved_since(run):
            self.position = run.position
        return run.position == len(run.batches)

    def complete(self, run: Pass) -> None:
        """`run`'s epoch is delivered: the next epoch from its beginning (unless moved meanwhile)."""
        if not self._moved_since(run):
            self._start(run.epoch + 1)

    def end(self, run: Pass) -> None:
        """`run`'s stream ended: a pass that found nothing left of its epoch moves on to the next."""
        if run.start >= len(run.batches):
            self.complete(run)

    def progress(self, order: OrderSpec) -> Progress:
        """How far the epoch is, for a state: the samples of its global order done — those done
        before a resume and `batch_size * world_size` for each batch since, at most all."""
        since = (self.position - self.first) * order.batch_size * order.world_size
        return Progress(self.epoch, min(self.done + since, order.samples), self.position)

    def resume(self, progress: Progress) -> None:
        """Continue from a parsed state: the next pass deals the rest of `progress.epoch`."""
        self.epoch, self.done = progress.epoch, progress.samples_done
        self.position = self.first = progress.batches_done
        self.pass_start = None
        self.moves += 1
