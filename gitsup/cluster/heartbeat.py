"""An activity's blocking work: run in a thread while the activity heartbeats, so that
Temporal knows the host is alive however long the work takes (a host whose heartbeats stop
has its activity moved to another)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from temporalio import activity

T = TypeVar("T")


async def heartbeating(
    work: Callable[..., T], *args: Any, details: Mapping[str, Any], every: float = 1.0
) -> T:
    """`work(*args)` in a thread, heartbeating `details` every `every` seconds until it
    returns; its result, or what it raised."""
    run = asyncio.ensure_future(asyncio.to_thread(work, *args))
    while not run.done():
        activity.heartbeat(dict(details))
        await asyncio.wait([run], timeout=every)
    return run.result()
