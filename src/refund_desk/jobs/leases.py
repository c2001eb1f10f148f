"""Keeping the leases of jobs held across slow calls (the processor), from one thread.

A job that calls the processor keeps its lease while the call is in flight, so no other
replica takes it over meanwhile (`JobQueue.held`). One thread per queue renews every held job
a third of a lease after it was taken or last renewed. The thread runs while something is
held and for `idle` seconds after, so a steady stream of refunds starts it once. A job whose
lease was lost (its renewal changed nothing) is renewed no more, and none is renewed after
its holder let it go. A process that dies stops renewing, and its leases run out as before.
(A thread per call cost about 150 µs of CPU, and its start and join were waited for.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

_Job = TypeVar("_Job")
Key = tuple[int, int]  # a job's id and attempt: one claim of it


class LeaseKeeper(Generic[_Job]):
    def __init__(self, renew: Callable[[_Job], bool], *, idle: float = 30.0) -> None:
        self._renew = renew
        self._idle = idle
        # the job, how often it is renewed (seconds), when it is renewed next
        self._held: dict[Key, tuple[_Job, float, float]] = {}
        self._renewing: set[Key] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The thread keeping the leases, while it runs."""
        return self._thread

    def hold(self, key: Key, job: _Job, every: float) -> None:
        with self._changed:
            self._held[key] = (job, every, time.monotonic() + every)
            if self._thread is None:
                self._thread = threading.Thread(target=self._keep, name="leases", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def release(self, key: Key) -> None:
        """Renew `key` no more; returns once a renewal of it under way has ended."""
        with self._changed:
            self._held.pop(key, None)
            while key in self._renewing:
                self._changed.wait()
            self._changed.notify_all()

    def _keep(self) -> None:
        idle_since: float | None = None
        while True:
            with self._changed:
                now = time.monotonic()
                if not self._held:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= self._idle:
                        self._thread = None  # the next `hold` starts another
                        return
                    self._changed.wait(self._idle - (now - idle_since))
                    continue
                idle_since = None
                due = [
                    (key, job, every) for key, (job, every, at) in self._held.items() if at <= now
                ]
                if not due:
                    self._changed.wait(min(at for *_, at in self._held.values()) - now)
                    continue
                for key, job, every in due:
                    self._held[key] = (job, every, now + every)
                    self._renewing.add(key)
            for key, job, _ in due:  # outside the lock: a renewal is a transaction
                self._renew_one(key, job)

    def _renew_one(self, key: Key, job: _Job) -> None:
        kept = True
        try:
            kept = self._renew(job)
        except Exception:  # the next period tries again; the lease may still hold
            log.warning("could not renew the lease of job %s", key[0], exc_info=True)
        with self._changed:
            self._renewing.discard(key)
            if not kept:  # lost: another replica has it now
                self._held.pop(key, None)
            self._changed.notify_all()
