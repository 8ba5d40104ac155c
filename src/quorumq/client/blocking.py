"""A blocking facade over the async clients, for callers without an event loop (Spark, scripts).

It runs the async client on a private event loop in a thread, so there is one implementation:

    with Blocking(Producer, "127.0.0.1:20000") as producer:
        results = producer.send_batch("orders", [Message(b"hello")])
"""

import asyncio
import functools
import inspect
import threading
from typing import Any, Callable


class Blocking:
    """Wraps the client that `factory(*args, **kwargs)` makes; its coroutine methods block instead."""

    def __init__(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="quorumq-client", daemon=True)
        self._thread.start()

        async def make() -> Any:  # gRPC channels belong to the loop they are made on
            return factory(*args, **kwargs)

        self._client = self._run(make())

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        def blocking_call(*args: Any, **kwargs: Any) -> Any:
            return self._run(attribute(*args, **kwargs))

        return blocking_call

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
