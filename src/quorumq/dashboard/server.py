"""The dashboard's server: the page, and a JSON view of the cluster the page polls.

GET /api/state asks the name server for the registered brokers, each broker for its status, and
each master's /metrics (its status names the address) for the per-topic and per-group counters;
rates are the counters' change since the previous state asked for. The page keeps the history
its charts draw. POST /api/topic, /api/send and /api/reset are the page's three actions, done
with the admin client and quorumq's producer as `quorumq admin` does them.
"""

import asyncio
import json
import logging
import urllib.request
from importlib import resources
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from quorumq import limits
from quorumq.client import AdminClient, ClientError, Credentials, Message, Producer
from quorumq.client.controller import ControllerClient
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.http import Response, serve_http

log = logging.getLogger("quorumq.dashboard")

STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
          "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8")}
CALL_TIMEOUT_S = 2.0  # a broker that does not answer within this is shown as not answering
SCRAPED = {"rocketmq_messages_in_total": "in", "rocketmq_messages_out_total": "out",
           "rocketmq_consumer_lag_messages": "lag"}


class Dashboard:
    def __init__(self, namesrv: str, controllers: list[str], replicator: Path | None, clock: Clock,
                 credentials: Credentials | None = None) -> None:
        self.namesrv = namesrv
        self.credentials = credentials  # what every call is signed with, the test message's send too
        self.clock = clock
        self.admin = AdminClient(namesrv, timeout_s=CALL_TIMEOUT_S, credentials=credentials)
        self.controllers = (ControllerClient(controllers, timeout_s=CALL_TIMEOUT_S, credentials=credentials)
                            if controllers else None)
        self.replicator = replicator
        self._last: tuple[float, dict] | None = None  # (when, counters) of the previous state
        self._rates: dict = {}

    async def close(self) -> None:
        await self.admin.close()
        if self.controllers is not None:
            await self.controllers.close()

    async def answer(self, method: str, path: str, body: bytes) -> Response:
        if method == "GET" and path in STATIC:
            name, content_type = STATIC[path]
            return "200 OK", content_type, resources.files(__package__).joinpath("static", name).read_bytes()
        if method == "GET" and path == "/api/state":
            return _json(await self.state())
        actions = {"/api/topic": self.create_topic, "/api/send": self.send, "/api/reset": self.reset_offset}
        if method == "POST" and path in actions:
            try:
                form = json.loads(body or b"{}")
                return _json({"ok": True, "result": await actions[path](form)})
            # A refusal is an answer the page shows (200), not a failed request in the browser's console.
            except (ValueError, KeyError, TypeError) as error:
                return _json({"ok": False, "error": f"BAD_REQUEST: {error}"})
            except ClientError as error:
                return _json({"ok": False, "error": str(error)})
        return "404 Not Found", "text/plain", b"not found\n"

    # The cluster as the page shows it.

    async def state(self) -> dict:
        try:
            brokers = list((await self.admin.cluster_info()).brokers)
        except ClientError as error:
            return {"namesrv": self.namesrv, "error": f"the name server does not answer: {error.name}"}
        statuses = await asyncio.gather(*(self._status(broker.address) for broker in brokers))
        groups: dict[tuple[str, str], list] = {}
        for broker, status in zip(brokers, statuses):
            groups.setdefault((broker.cluster, broker.broker_name), []).append(_replica(broker, status))
        masters = [replica for replicas in groups.values() for replica in replicas if replica["role"] == "master"]
        counters = _merge(await asyncio.gather(*(asyncio.to_thread(_scrape, m["metrics"]) for m in masters
                                                 if m.get("metrics"))))
        state = {"namesrv": self.namesrv, "time_ms": self.clock.now_ms(),
                 "groups": [_group(cluster, name, replicas) for (cluster, name), replicas in sorted(groups.items())],
                 **self._topics_and_groups(counters)}
        if self.controllers is not None:
            state["controller"] = await self._controller()
        if self.replicator is not None:
            state["replicator"] = _replicator(self.replicator)
        return state

    async def _status(self, address: str) -> dict | None:
        try:
            return await self.admin.broker_status(address)
        except ClientError:
            return None

    def _topics_and_groups(self, counters: dict) -> dict:
        """Totals and rates per topic (in, out) and per consumer group and topic (out, lag)."""
        now = self.clock.monotonic()
        if self._last is not None and now - self._last[0] >= 1.0:
            elapsed, before = now - self._last[0], self._last[1]
            self._rates = {key: max(value - before.get(key, value), 0) / elapsed for key, value in counters.items()
                           if key[0] in ("in", "out")}
        if self._last is None or now - self._last[0] >= 1.0:
            self._last = (now, counters)
        topics: dict[str, dict] = {}
        consumers: dict[tuple[str, str], dict] = {}
        for (kind, topic, group), value in counters.items():
            rate = self._rates.get((kind, topic, group), 0.0)
            entry = topics.setdefault(topic, {"topic": topic, "in": 0, "in_rate": 0.0, "out": 0, "out_rate": 0.0})
            if kind == "in":
                entry["in"] += value
                entry["in_rate"] += rate
            else:
                consumer = consumers.setdefault((group, topic), {"group": group, "topic": topic, "lag": 0,
                                                                 "out_rate": 0.0})
                if kind == "out":
                    entry["out"] += value
                    entry["out_rate"] += rate
                    consumer["out_rate"] += rate
                else:
                    consumer["lag"] += value
        return {"topics": sorted(topics.values(), key=lambda t: t["topic"]),
                "consumer_groups": sorted(consumers.values(), key=lambda c: (c["group"], c["topic"]))}

    async def _controller(self) -> dict:
        try:
            meta = await self.controllers.metadata()
        except ClientError as error:
            return {"error": error.name}
        return {"leader": meta.leader_address, "controllers": list(meta.controllers)}

    # Actions.

    async def create_topic(self, form: dict) -> str:
        topic, queues = form["topic"], int(form.get("queues", 8))
        if not 0 < queues <= limits.QUEUES_PER_TOPIC_MAX:
            raise ValueError(f"queues must lie in 1..{limits.QUEUES_PER_TOPIC_MAX}")
        masters = await self.admin.brokers(form.get("cluster") or None, masters_only=True)
        for broker in masters:
            await self.admin.update_topic(broker.address, topic, queues, queues)
        return f"topic {topic} with {queues} queues on {', '.join(sorted({b.broker_name for b in masters}))}"

    async def send(self, form: dict) -> str:
        async with Producer(self.namesrv, credentials=self.credentials) as producer:
            result = await producer.send(form["topic"], Message(str(form.get("body", "")).encode(),
                                                                tag=form.get("tag") or None))
        return f"{result.status} {result.broker_name} queue {result.queue_id} offset {result.queue_offset}"

    async def reset_offset(self, form: dict) -> str:
        timestamp_ms = int(form.get("timestamp_ms", self.clock.now_ms()))
        progress = await self.admin.reset_offset_by_time(form["group"], form["topic"], timestamp_ms)
        return f"{form['group']} on {form['topic']} reset on {len(progress)} master(s)"


def _replica(broker: pb.BrokerInfo, status: dict | None) -> dict:
    replica = {"address": broker.address, "id": broker.broker_id, "answers": status is not None,
               "role": "slave" if broker.role == "SLAVE" else "master"}
    if status is not None:
        replica.update(role="slave" if status["brokerRole"] == "SLAVE" else "master",
                       id=int(status.get("brokerId", broker.broker_id)), max_offset=int(status["commitLogMaxOffset"]),
                       epoch=int(status.get("masterEpoch", 0)), sync_state_set=status.get("syncStateSet", ""),
                       fenced=status.get("fenced") == "True", metrics=status.get("metricsAddress", ""))
    return replica


def _group(cluster: str, name: str, replicas: list[dict]) -> dict:
    """A broker group: its master (the one answering replica that says so), its slaves and each
    one's lag behind the master's log."""
    masters = [r for r in replicas if r["answers"] and r["role"] == "master"]
    master = max(masters, key=lambda r: r.get("epoch", 0)) if masters else None
    for replica in replicas:
        if master is not None and replica is not master and replica["answers"]:
            replica["lag_bytes"] = max(master["max_offset"] - replica["max_offset"], 0)
    return {"cluster": cluster, "broker_name": name, "master": master["address"] if master else None,
            "epoch": master.get("epoch", 0) if master else 0,
            "sync_state_set": master.get("sync_state_set", "") if master else "",
            "replicas": sorted(replicas, key=lambda r: (r is not master, r["address"]))}


def _scrape(address: str) -> dict:
    """A master's counters: (kind, topic, group) -> value, kind in, out or lag."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=CALL_TIMEOUT_S) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    counters = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            kind = SCRAPED.get(sample.name)
            if kind is not None:
                counters[(kind, sample.labels["topic"], sample.labels.get("consumer_group", ""))] = sample.value
    return counters


def _merge(scraped: list[dict]) -> dict:
    merged: dict = {}
    for counters in scraped:
        for key, value in counters.items():
            merged[key] = merged.get(key, 0) + value
    return merged


def _replicator(checkpoint: Path) -> dict:
    found = {}
    for name in ("heartbeat", "replicate-metrics"):
        try:
            found[name.split("-")[-1]] = json.loads((checkpoint / f"{name}.json").read_text())
        except (OSError, ValueError):
            found[name.split("-")[-1]] = None
    return found


def _json(document: dict) -> Response:
    return "200 OK", "application/json", json.dumps(document).encode()


async def serve(namesrv: str, controllers: list[str], replicator: Path | None, host: str, port: int,
                credentials: Credentials | None = None) -> None:
    dashboard = Dashboard(namesrv, controllers, replicator, Clock(), credentials)
    server = await serve_http(host, port, dashboard.answer, "the dashboard")
    log.info("dashboard at http://%s:%d/", host, port)
    try:
        await asyncio.Event().wait()  # until SIGTERM or SIGINT ends the process
    finally:
        server.close()
        await dashboard.close()
