"""Unary calls as plans: the retry policy and every operation made of unary calls,
written once, with no transport in them; and the two drivers that carry a plan out.

::

    plan (a generator) ──yields──▶ Attempt(method, request, write, limit) ─▶ driver makes it
          ▲                  └──▶ a float: pause that many seconds          (one attempt)
          └── the answer (send) or the ConcordError (throw) ◀──────────────────┘

An operation (``concord.aio.Client._get``, ``_create``, ...) is a generator that
builds its requests, ``yield from``s ``unary()`` for each call, and returns its
result; ``unary()`` is the policy of one call (the deadline of each attempt, which
failures are retried, the back-off between attempts). A driver only makes single
attempts and pauses: ``drive()`` awaits them on the asyncio core's loop (grpc.aio),
``drive_blocking()`` makes them on the caller's thread (blocking grpcio, the sync
client). What an attempt leaves behind (the zxid seen, the host moved to after a
failure) is the client's ``_answered`` / ``_failed``, shared by both.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Generator, TypeVar, Union

from .errors import ConcordError
from .types import Retry

T = TypeVar("T")


class Attempt:
    """One attempt of a unary call: ``method(endpoint)`` is the stub's callable,
    ``limit`` the attempt's deadline in seconds (None: none)."""

    __slots__ = ("method", "request", "write", "limit")

    def __init__(self, method: Callable[[Any], Any], request: Any, write: bool, limit: float | None) -> None:
        self.method = method
        self.request = request
        self.write = write
        self.limit = limit


#: What a plan yields: an attempt to make, or a pause (seconds).
Step = Union[Attempt, float]
#: A plan: yields steps, is sent each attempt's answer (None after a pause) or thrown
#: its ConcordError, and returns the operation's result.
Plan = Generator[Step, Any, T]


def unary(
    retry: Retry | None,
    method: Callable[[Any], Any],
    request: Any,
    *,
    write: bool,
    dedup: bool = False,
    limit: float | None = None,
) -> Plan[Any]:
    """One unary call under ``limit`` per attempt and the ``retry`` policy: retried
    when the failure is retry-safe, or (a deduplicated write) when its outcome is
    unknown; returns the answer, or raises the last failure."""
    attempt = Attempt(method, request, write, limit)
    first_failure: float | None = None
    tries = 0
    while True:
        try:
            return (yield attempt)
        except ConcordError as err:
            if retry is None or not (err.retry_safe or (dedup and err.indeterminate)):
                raise
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            tries += 1
            if not retry.allows(tries, now - first_failure):
                raise
        yield retry.jittered(tries)


async def drive(plan: Plan[T], attempt: Callable[[Attempt], Awaitable[Any]]) -> T:
    """Carries ``plan`` out on the running loop; ``attempt`` makes one attempt."""
    try:
        step = next(plan)
        while True:
            if step.__class__ is not Attempt:
                await asyncio.sleep(step)  # type: ignore[arg-type]
                step = plan.send(None)
                continue
            try:
                answer = await attempt(step)  # type: ignore[arg-type]
            except ConcordError as err:
                step = plan.throw(err)
            else:
                step = plan.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()


def drive_blocking(plan: Plan[T], attempt: Callable[[Attempt], Any]) -> T:
    """Carries ``plan`` out on this thread; ``attempt`` makes one attempt, blocking."""
    try:
        step = next(plan)
        while True:
            if step.__class__ is not Attempt:
                time.sleep(step)  # type: ignore[arg-type]
                step = plan.send(None)
                continue
            try:
                answer = attempt(step)  # type: ignore[arg-type]
            except ConcordError as err:
                step = plan.throw(err)
            else:
                step = plan.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()


def retry_call(retry: Retry, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)``, called again after each retry-safe ConcordError
    while ``retry`` allows, blocking between (kazoo's ``KazooRetry.__call__``)."""
    first_failure: float | None = None
    tries = 0
    while True:
        try:
            return func(*args, **kwargs)
        except ConcordError as err:
            if not err.retry_safe:
                raise
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            tries += 1
            if not retry.allows(tries, now - first_failure):
                raise
        time.sleep(retry.jittered(tries))
