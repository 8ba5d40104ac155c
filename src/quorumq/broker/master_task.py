"""A background task that runs while the broker is the master: started as it takes the role,
cancelled as it leaves it or closes (the delay and transactional messages' loops)."""

import asyncio
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import Any


class MasterTask:
    def __init__(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._run = run
        self._task: asyncio.Task | None = None

    @property
    def running(self) -> bool:
        """Started and not stopped since."""
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Cancel the task and wait for it to end; `running` is False at once, before the wait."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
