"""The change notification of the controller (`simrun.service.changes.Changes`): versions
only grow, a wait returns once the run changed past the version read, and nothing that
happens between the read and the wait is missed."""

from __future__ import annotations

import asyncio

from simrun.service.changes import Changes


def test_versions_grow_per_run_and_for_all() -> None:
    """`notify` raises the version of its run only; `notify_all` raises every run's, those
    never seen before included."""
    changes = Changes()
    assert changes.version("a") == 0
    changes.notify("a")
    assert (changes.version("a"), changes.version("b")) == (1, 0)
    changes.notify_all()
    assert (changes.version("a"), changes.version("b"), changes.version("new")) == (2, 1, 1)


async def test_a_change_before_the_wait_is_not_missed() -> None:
    """A change between reading the version and waiting makes the wait return at once."""
    changes = Changes()
    seen = changes.version("run")
    changes.notify("run")
    assert await asyncio.wait_for(changes.wait("run", seen, timeout_s=60), 5) == seen + 1


async def test_a_wait_returns_when_its_run_changes() -> None:
    """A waiter wakes when its run is notified (or every run is), with the new version."""
    changes = Changes()
    for notify in (lambda: changes.notify("run"), changes.notify_all):
        seen = changes.version("run")
        waiter = asyncio.ensure_future(changes.wait("run", seen, timeout_s=60))
        await asyncio.sleep(0)
        assert not waiter.done()
        notify()
        assert await asyncio.wait_for(waiter, 5) == seen + 1


async def test_another_runs_change_does_not_end_the_wait() -> None:
    """A notification of another run wakes the waiter, which waits on (until its timeout)
    and returns its run's version unchanged."""
    changes = Changes()
    waiter = asyncio.ensure_future(changes.wait("run", 0, timeout_s=0.2))
    await asyncio.sleep(0)
    changes.notify("other")
    await asyncio.sleep(0)
    assert not waiter.done()
    assert await asyncio.wait_for(waiter, 5) == 0


async def test_close_wakes_every_waiter_for_good() -> None:
    """`close` (the service stops) ends every wait now, and later waits at once."""
    changes = Changes()
    waiters = [asyncio.ensure_future(changes.wait(run, 5, timeout_s=60)) for run in "ab"]
    await asyncio.sleep(0)
    changes.close()
    await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert changes.closed
    await asyncio.wait_for(changes.wait("c", 99, timeout_s=60), 5)
