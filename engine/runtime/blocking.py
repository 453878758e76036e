"""Blocking waits (queue reads and writes, store waits) that cannot hang a netviz process forever.

Caffe2's queue ops block until another thread fills or drains the queue: a plan's concurrent
substeps run on threads, and Python code (data_workers, pipelines) feeds queues from its own
threads.  netviz blocks the same way (``threading.Condition``), with two exits Caffe2 lacks:

* **deadlock** — a waiter looks, every poll interval, for another live thread that is not itself
  waiting here (a blocked queue op, or a plan joining its substep threads) nor asleep until some
  thread wakes it (an untimed lock/queue wait or join, an idle thread-pool worker).  When there is
  none, nothing can ever wake it, so it stops with a one-line error instead of hanging;
* **single-threaded runs** — inside :func:`never_wait` (the debugger steps ops one at a time, in
  order, on one thread) a wait that is not satisfied at once is that same error.

Example::

    with q.cond:
        if not wait_until(q.cond, lambda: bool(q.records), stop=lambda: q.closed, timeout=None,
                          deadlock=lambda: ExecutionError("queue q is empty and open ...")):
            ...  # closed (or timed out): Caffe2's "false" status
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

POLL_S = 0.05
"""How often a waiter re-checks for a deadlock (a notify wakes it at once)."""
DEADLOCK_S = 0.3
"""How long no other thread must be able to progress before a wait is a deadlock."""

_waiting: dict[int, object] = {}  # thread ident -> the condition it waits on, or the threads it joins
_local = threading.local()


@contextlib.contextmanager
def waiting(on: object) -> Iterator[None]:
    """Mark this thread as unable to make progress for others: blocked on condition `on`, or
    joining the threads of tuple `on`."""
    me = threading.get_ident()
    _waiting[me] = on
    try:
        yield
    finally:
        _waiting.pop(me, None)


def notify_all(cond: threading.Condition) -> None:
    """``cond.notify_all()`` (caller holds `cond`); its waiters count as runnable again at once.

    NOTE: a woken waiter only leaves the waiting set when it next runs; until then another thread
    checking for a deadlock must not count it as blocked.
    """
    cond.notify_all()
    for ident, on in list(_waiting.items()):
        if on is cond:
            _waiting.pop(ident, None)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Inside the block a wait that is not satisfied at once raises its deadlock error."""
    old, _local.single = getattr(_local, "single", False), True
    try:
        yield
    finally:
        _local.single = old


def is_single_threaded() -> bool:
    """True inside :func:`single_threaded` (or :func:`never_wait`) on this thread."""
    return getattr(_local, "single", False)


def never_wait(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: run `fn` under :func:`single_threaded` (the debugger's one-op primitive)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with single_threaded():
            return fn(*args, **kwargs)
    return wrapper


_POOL_WORKER = os.path.join("concurrent", "futures", "thread.py")


def _asleep(frame: Any) -> bool:
    """True when a thread whose innermost Python frame is `frame` sleeps until another thread wakes
    it: an untimed Condition/Event/queue wait, an untimed join of a live thread, or an idle
    thread-pool worker waiting for work (such threads fill no queue on their own)."""
    code = frame.f_code
    if code.co_filename.endswith(_POOL_WORKER):
        return code.co_name == "_worker"
    if not code.co_filename.endswith("threading.py"):
        return False
    if code.co_name == "wait":  # Condition.wait (Event.wait and queue.Queue.get end there too)
        return frame.f_locals.get("timeout") is None
    if code.co_name == "_wait_for_tstate_lock":  # Thread.join
        joined = frame.f_locals.get("self")
        return frame.f_locals.get("timeout", -1) == -1 and joined is not None and joined.is_alive()
    return False


def others_can_progress() -> bool:
    """True when some other live thread may still fill or drain a queue: it is not blocked in a
    netviz wait, nor asleep until another thread wakes it (:func:`_asleep`).

    A thread joining others is blocked while one of them is alive; once all have ended it is about
    to go on (a plan step closing a queue after its producers finished, say).
    """
    me = threading.get_ident()
    threads = set(threading.enumerate())  # NOTE: + joined threads: one just started may be missing here
    threads.update(j for on in list(_waiting.values()) if isinstance(on, tuple) for j in on)
    frames = sys._current_frames()
    for t in threads:
        if t.ident == me or not t.is_alive():
            continue
        on = _waiting.get(t.ident)
        if on is None:
            frame = frames.get(t.ident)
            if frame is None or not _asleep(frame):
                return True
        elif isinstance(on, tuple) and not any(j.is_alive() for j in on):
            return True
    return False


def wait_until(cond: threading.Condition, ready: Callable[[], bool], *, stop: Callable[[], bool],
               timeout: float | None, deadlock: Callable[[], Exception]) -> bool:
    """Wait on `cond` (held by the caller) until `ready()`; False once `stop()` or after `timeout` s.

    Raises
    ------
    Exception
        ``deadlock()`` when, without a timeout, no other thread could ever make `ready()` true (or
        the run is single-threaded).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    stuck_since = None
    while not ready():
        if stop():
            return False
        now = time.monotonic()
        left = None if deadline is None else deadline - now
        if left is not None and left <= 0:
            return False
        if deadline is None:  # NOTE: a wait with a timeout ends anyway: it waits it out, as in Caffe2
            if is_single_threaded():
                raise deadlock()
            # NOTE: a thread just woken still looks asleep until it runs: only a deadlock seen for
            # DEADLOCK_S on end is one.
            stuck_since = None if others_can_progress() else (stuck_since or now)
            if stuck_since is not None and now - stuck_since >= DEADLOCK_S:
                raise deadlock()
        # NOTE: a timed waiter goes on by itself, so it does not count as blocked for the others
        with waiting(cond) if deadline is None else contextlib.nullcontext():
            cond.wait(POLL_S if left is None else min(POLL_S, left))
    return True


def join_all(threads: list[threading.Thread]) -> None:
    """Join `threads`, counted as waiting meanwhile (a joiner fills no queue)."""
    with waiting(tuple(threads)):
        for t in threads:
            t.join()
