"""Continuous batching: the model's steps on one worker thread, over whatever sequences are in
flight.

Requests add their sequences (``submit``) to a waiting queue; beyond the free places of the
batch, at most ``max_queue`` sequences wait (more is ``QueueFull``: the server answers 503). Before each step the worker
drops the sequences cancelled since the last one (a client that went away) and moves waiting
sequences into the running batch, up to ``max_batch``. One step is one ``Model.step_many``
call over the running sequences:

- every sequence past its prompt contributes its last token (a decode row);
- sequences still reading their prompt contribute a chunk of it, oldest first, at most
  ``prefill_chunk`` prompt tokens in the whole step, so a long prompt delays the running
  streams by one chunk per step, never by its whole length.

After the step each sequence reads its own logits (``Sequence.take``); one that finishes
leaves the batch at once, and a waiting one takes its place at the next step. Model.step_many
gives every sequence, bit for bit, the logits of its run alone, and every sequence samples
from its own generator: what a request gets does not depend on what else is running.

Faults stay with their sequence: an exception while a sequence reads its logits (logits that
are not finite, a token without text) ends that sequence with an error and the others go on;
an exception from the step itself ends the sequences of that step (their requests answer 500)
and the worker goes on with the next. The step releases the GIL, so the event loop serving
HTTP runs beside it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Deque, Iterable, List, Optional

from .metrics import Metrics
from .sequence import Sequence

__all__ = ["Engine", "QueueFull", "EngineStopped"]


class QueueFull(Exception):
    """The waiting queue is full: the request is refused (503 with Retry-After)."""


class EngineStopped(Exception):
    """The engine is stopping and takes no new sequences (503)."""


class Engine:
    """The worker thread that runs ``model``'s steps (see the module). ``start()`` starts it,
    ``stop()`` ends it (sequences still in flight end with an error)."""

    def __init__(self, model: Any, *, max_batch: int = 8, max_queue: int = 64, prefill_chunk: int = 128,
                 metrics: Optional[Metrics] = None) -> None:
        for name, v in (("max_batch", max_batch), ("max_queue", max_queue), ("prefill_chunk", prefill_chunk)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "max_queue" else 1):
                raise ValueError(f"Engine: {name} must be a positive int, got {v!r}")
        self.model = model
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.prefill_chunk = prefill_chunk
        self.metrics = metrics
        self._cond = threading.Condition()
        self._waiting: Deque[Sequence] = deque()
        self._running: List[Sequence] = []
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self.steps = 0

    # ------------------------------------------------------------------ requests' side
    def submit(self, sequences: Iterable[Sequence]) -> None:
        """Queue the sequences of one request (all or none)."""
        seqs = list(sequences)
        with self._cond:
            if self._stopping:
                raise EngineStopped("the server is shutting down")
            # places: the free slots of the batch (taken at the next step) and the queue
            free = max(0, self.max_batch - len(self._running))
            if len(self._waiting) + len(seqs) > self.max_queue + free:
                raise QueueFull(f"{len(self._waiting)} sequences are waiting (--max-queue {self.max_queue})")
            self._waiting.extend(seqs)
            self._gauges()
            self._cond.notify()

    def cancel(self, sequences: Iterable[Sequence]) -> None:
        """Drop the sequences before the next step (their caches are freed then)."""
        with self._cond:
            for s in sequences:
                if not s.done:
                    s.cancelled.set()
            self._cond.notify()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("Engine.start: already started")
        self._thread = threading.Thread(target=self._run, name="gptcore-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: Optional[float] = None) -> int:
        """Stop taking sequences, end those still in flight with an error, and join the
        worker. Returns how many were cut off."""
        with self._cond:
            self._stopping = True
            cut = [s for s in list(self._waiting) + self._running if not s.done and not s.cancelled.is_set()]
            for s in cut:
                s.cancelled.set()
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        for s in cut:
            if not s.done:
                s.fail("the server stopped before this sequence finished")
        return len(cut)

    # ------------------------------------------------------------------ the worker
    def _gauges(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(len(self._waiting))
            self.metrics.running.set(len(self._running))

    def _schedule(self) -> bool:
        """Under the lock: drop cancelled sequences, admit waiting ones. False when the worker
        should end."""
        while True:
            self._running = [s for s in self._running if not (s.done or s.cancelled.is_set())]
            if any(s.cancelled.is_set() for s in self._waiting):
                self._waiting = deque(s for s in self._waiting if not s.cancelled.is_set())
            while self._waiting and len(self._running) < self.max_batch:
                s = self._waiting.popleft()
                s.cache = self.model.new_cache(1)
                self._running.append(s)
            self._gauges()
            if self._running:
                return True
            if self._stopping:
                return False
            self._cond.wait()

    def _plan(self) -> List[tuple]:
        """(sequence, ids) for the next step: every decode row, then prompt chunks oldest
        first within the step's prompt budget."""
        plan = [(s, s.next_ids(1)) for s in self._running if not s.prefilling]
        budget = self.prefill_chunk
        for s in self._running:
            if s.prefilling and budget > 0:
                ids = s.next_ids(budget)
                budget -= ids.size
                plan.append((s, ids))
        return plan

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._schedule():
                    return
            plan = self._plan()
            try:
                outs = self.model.step_many([s.cache for s, _ in plan], [ids for _, ids in plan],
                                            logits=[s.logits_mode for s, _ in plan])
            except Exception as e:  # the whole step failed: its sequences end, the worker goes on
                for s, _ in plan:
                    s.fail(f"the model step failed: {type(e).__name__}: {e}")
                if self.metrics is not None:
                    self.metrics.sequence_errors.inc(len(plan))
                continue
            self.steps += 1
            now = time.perf_counter()
            m = self.metrics
            if m is not None:
                m.steps.inc()
                m.step_rows.observe(sum(ids.size for _, ids in plan))
                m.step_sequences.observe(len(plan))
            for (s, ids), logits in zip(plan, outs):
                if s.cancelled.is_set():
                    continue
                try:
                    r = s.take(ids, logits, now)
                except Exception as e:  # this sequence only
                    s.fail(f"{type(e).__name__}: {e}")
                    if m is not None:
                        m.sequence_errors.inc()
                    continue
                if r is not None and m is not None:
                    finished, since = r
                    m.completion_tokens.inc()
                    (m.ttft if s.generated == 1 else m.inter_token).observe(since)
