"""The one place where the blocking Python API meets asyncio: an event loop in a thread of
its own, so a notebook's running loop is never used and Ctrl-C still reaches the caller."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds `Bridge.close` waits for the loop's thread to end.
CLOSE_TIMEOUT_S = 10.0


class Bridge:
    """An event loop running in a daemon thread until `close`."""

    def __init__(self, name: str = "simrun-api") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def closed(self) -> bool:
        return self._loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop; its future (cancelling it cancels the coroutine)."""
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError(
                "this event loop of the API is closed (the run's `LocalSession` stopped)"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and return its result (or raise its exception). When
        the wait is interrupted (Ctrl-C), the coroutine is cancelled."""
        future = self.submit(coro)
        try:
            return future.result()
        finally:
            future.cancel()  # a no-op once it is done

    def close(self) -> None:
        """Cancel what still runs on the loop, stop it and end its thread."""
        if self._loop.is_closed():
            return

        async def cancel_all() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(CLOSE_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()
