"""A controller's metrics: RocketMQ 5's controller names (ControllerMetricsConstant: `role`,
`active_broker_num`, `request_total`, `request_latency` in microseconds, `election_total`) and
quorumq_ ones for the causes of elections and the preferred master's hand-back
(docs/observability.md)."""

from collections.abc import Iterable

from quorumq.clock import Clock
from quorumq.core import controller_state as cs
from quorumq.metrics import Families, Histogram

REQUEST_LATENCY_BUCKETS_US = (100, 1000, 10_000, 100_000, 1_000_000, 3_000_000)
HANDBACK_BUCKETS_S = (0.5, 1, 2, 5, 10, 30, 60)


class ControllerCounters:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.requests: dict[tuple[str, str], Histogram] = {}  # (request type, status) -> latency
        self.elections: dict[tuple[str, str, str], int] = {}  # (cluster, broker set, result)
        self.elected: dict[tuple[str, str], int] = {}  # (broker set, cause) -> masters elected
        self.handbacks: dict[str, Histogram] = {}
        self.handback_asked_s: dict[str, float] = {}  # broker set -> when its first hand-over was asked

    def request(self, request, reply_code: int, started_s: float) -> None:
        status = "success" if reply_code == cs.Code.SUCCESS else "failed"
        key = (type(request).__name__, status)
        histogram = self.requests.get(key)
        if histogram is None:
            histogram = self.requests[key] = Histogram(REQUEST_LATENCY_BUCKETS_US)
        histogram.observe((self.clock.monotonic() - started_s) * 1e6)

    def election(self, before: cs.BrokerSet | None, request: cs.ElectMaster, reply_code: int,
                 events: tuple) -> None:
        """An ElectMaster decided: its result as RocketMQ names it; a new master by its cause."""
        elected = [event.master_id for event in events if isinstance(event, cs.MasterElected)]
        if elected and elected[0] is not None:
            result = "new_master_elected"
            cause = "first" if before is None or before.master_epoch == 0 else request.trigger.value
            key = (request.name, cause)
            self.elected[key] = self.elected.get(key, 0) + 1
            asked = self.handback_asked_s.pop(request.name, None)
            if request.trigger is cs.Trigger.ADMIN and asked is not None:
                histogram = self.handbacks.setdefault(request.name, Histogram(HANDBACK_BUCKETS_S))
                histogram.observe(self.clock.monotonic() - asked)
        elif reply_code == cs.Code.CONTROLLER_MASTER_STILL_EXIST:
            result = "keep_current_master"
        else:
            result = "no_master_elected"
        key = (request.cluster, request.name, result)
        self.elections[key] = self.elections.get(key, 0) + 1

    def handback_asked(self, broker_set: str) -> None:
        self.handback_asked_s.setdefault(broker_set, self.clock.monotonic())


def collect(controller, now_ms: int) -> Iterable:
    counters: ControllerCounters = controller.metrics
    families = Families({"node_type": "controller", "node_id": controller.address})
    yield families.gauge("role", "1 while this controller leads, else 0", int(controller.is_leader))
    active = {(controller.clusters.get(name, ""), name): sum(live.active(now_ms) for live in brokers.values())
              for name, brokers in controller.live.items()}
    yield families.gauge("active_broker_num", "brokers heard from within their heartbeat timeout (leader only)",
                         active, ["cluster", "broker_set"])
    yield families.counter("request_total", "requests answered", {key: sum(histogram.counts) for key, histogram
                                                                  in counters.requests.items()},
                           ["request_type", "request_handle_status"])
    yield families.histogram("request_latency", "request handling time in microseconds",
                             ["request_type", "request_handle_status"], counters.requests)
    yield families.counter("election_total", "ElectMaster decisions by result", counters.elections,
                           ["cluster", "broker_set", "election_result"])
    yield families.counter("quorumq_elections_total", "masters elected, by cause", counters.elected,
                           ["broker_set", "cause"])
    yield families.histogram("quorumq_preferred_master_handback_seconds", "from the first hand-over request to "
                             "the preferred broker's election", ["broker_set"], counters.handbacks)

