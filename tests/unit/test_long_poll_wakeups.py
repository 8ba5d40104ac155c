"""Long polls' wake-up state (broker/pulls.py Arrivals): kept only while a poll waits."""

import asyncio

from quorumq.broker.pulls import Arrivals


def test_polls_on_many_never_written_topics_leave_nothing_behind():
    arrivals = Arrivals()

    async def poll_each() -> None:
        await asyncio.gather(*(arrivals.wait(f"never-created-{i}", 0.001) for i in range(5000)))

    asyncio.run(poll_each())
    assert len(arrivals) == 0


def test_a_send_wakes_every_poll_of_its_topic_and_a_timed_out_poll_leaves_the_others_waiting():
    arrivals = Arrivals()

    async def scenario() -> None:
        short = asyncio.create_task(arrivals.wait("T", 0.01))
        long = asyncio.create_task(arrivals.wait("T", 30))
        other = asyncio.create_task(arrivals.wait("T", 30))
        await short
        assert len(arrivals) == 1, "the topic's other polls still wait"
        arrivals.notify("T")
        await asyncio.wait_for(asyncio.gather(long, other), 5)
        assert len(arrivals) == 0

    asyncio.run(scenario())
