"""The cheapest way to serve a unary gRPC call in Python (issue 24): a v5 SendMessage of one 1 KiB
message, parsed and answered as a stateless proxy would before any work of its own, by each kind of
server this machine can run:

  aio            grpc.aio on asyncio's default event loop (what quorumq's servers are today)
  aio-uvloop     grpc.aio on uvloop's event loop
  threads-N      grpc's threaded server (grpc.server) with a pool of N handler threads

Each server runs in a process of its own; `--clients` load processes, each a grpc.aio channel sending
the same serialized request with `--inflight` / clients calls in flight, for `--seconds`. Reported: the
server's CPU per call (user + system, from /proc: the figure a proxy's sizing needs, little moved by
other load), calls per second and the clients' p50 / p99 (both shared with the clients on these cpus).
The servers are measured in turn in each of `--repeat` rounds, each round in a rotated order; the
table shows medians. It prints one table and writes bench/results/bench_rpc_servers.json.

    .venv/bin/python bench/bench_rpc_servers.py --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import uvloop
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc as sg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import HOST, PYTHON  # noqa: E402

NAME = "bench_rpc_servers"
BODY_SIZE = 1024
SEND_MESSAGE = "/apache.rocketmq.v2.MessagingService/SendMessage"
KINDS = ("aio", "aio-uvloop", "threads-4", "threads-16", "threads-64")


def _answer(request):
    """What every server does with a call: the request parsed (by its stub), one entry answered."""
    ok = d.Status(code=d.Code.OK, message="OK")
    entries = [s.SendResultEntry(status=ok, message_id=m.system_properties.message_id, offset=0)
               for m in request.messages]
    return s.SendMessageResponse(status=ok, entries=entries)


def serve(kind: str, port: int) -> None:
    address = f"{HOST}:{port}"
    if kind.startswith("threads-"):
        class Threaded(sg.MessagingServiceServicer):
            def SendMessage(self, request, context):
                return _answer(request)

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=int(kind.split("-")[1])))
        sg.add_MessagingServiceServicer_to_server(Threaded(), server)
        server.add_insecure_port(address)
        server.start()
        server.wait_for_termination()
        return

    class Async(sg.MessagingServiceServicer):
        async def SendMessage(self, request, context):
            return _answer(request)

    async def main() -> None:
        server = grpc.aio.server()
        sg.add_MessagingServiceServicer_to_server(Async(), server)
        server.add_insecure_port(address)
        await server.start()
        await server.wait_for_termination()

    if kind == "aio-uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())


def load(port: int, seconds: float, inflight: int) -> None:
    """One client process: `inflight` calls at a time for `seconds`; emits calls and latencies."""
    message = d.Message(topic=d.Resource(name="BenchTopic"), body=b"x" * BODY_SIZE,
                        system_properties=d.SystemProperties(message_id="01BENCH", message_type=d.MessageType.NORMAL,
                                                             body_encoding=d.Encoding.IDENTITY))
    request = s.SendMessageRequest(messages=[message]).SerializeToString()

    async def main() -> dict:
        async with grpc.aio.insecure_channel(f"{HOST}:{port}") as channel:
            call = channel.unary_unary(SEND_MESSAGE, request_serializer=None, response_deserializer=None)
            await call(request, wait_for_ready=True)
            latencies: list[float] = []
            end = time.monotonic() + seconds

            async def sender() -> None:
                while time.monotonic() < end:
                    started = time.perf_counter()
                    await call(request)
                    latencies.append(time.perf_counter() - started)
            await asyncio.gather(*(sender() for _ in range(inflight)))
            return {"calls": len(latencies), **common.latency_summary(latencies)}

    common.emit_result(asyncio.run(main()))


def measure(kind: str, port: int, opts, workdir: Path) -> dict:
    """One server of `kind` on `port` under the clients' load; its figures, or {"error": ...}."""
    log = workdir / f"{kind}.log"
    server = common.start([PYTHON, __file__, "_server", kind, port], label=kind, log=log)
    try:
        if not common.wait_port(port, proc=server):
            return {"error": f"{kind} did not listen (see {log})"}
        cpu_before = common.cpu_seconds(server.pid)
        results: list[dict] = []
        argv = [PYTHON, __file__, "_load", port, opts.seconds, opts.inflight // opts.clients]

        def client(index: int) -> None:
            results.append(common.run_worker(argv, label=f"{kind} client {index}", timeout=opts.seconds + 60,
                                             log=workdir / "clients.log"))
        threads = [threading.Thread(target=client, args=(i,)) for i in range(opts.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu = common.cpu_seconds(server.pid) - cpu_before
    finally:
        common.stop_pid(server.pid)
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        return {"error": failed[0]}
    calls = sum(r["calls"] for r in results)
    return {"calls": calls, "rate": calls / opts.seconds, "server_cpu_us_per_call": cpu / calls * 1e6,
            "p50_ms": statistics.median(r["p50_ms"] for r in results),
            "p99_ms": max(r["p99_ms"] for r in results)}


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "_server":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    if len(sys.argv) >= 2 and sys.argv[1] == "_load":
        load(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
        return
    p = argparse.ArgumentParser(description="the cheapest unary gRPC server in Python (see the module docstring)")
    p.add_argument("--base-port", type=int, default=62900,
                   help="the servers' first port (default 62900); each measurement takes the next")
    p.add_argument("--seconds", type=float, default=5.0, help="length of each measurement (default 5)")
    p.add_argument("--repeat", type=int, default=3, help="rounds of every server (default 3)")
    p.add_argument("--clients", type=int, default=2, help="load processes (default 2)")
    p.add_argument("--inflight", type=int, default=64, help="calls in flight over all clients (default 64)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"servers to measure (default {','.join(KINDS)})")
    p.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                   help="wait up to this long for idle cpus before starting")
    opts = p.parse_args()
    common.install_signal_handlers()
    notes = common.settle(opts.wait_quiet)
    kinds = opts.kinds.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="bench-rpc-servers-"))
    started = time.monotonic()
    runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for round_index in range(opts.repeat):
        print(f"--- round {round_index + 1} of {opts.repeat}", flush=True)
        for kind in kinds[round_index % len(kinds):] + kinds[:round_index % len(kinds)]:
            port = opts.base_port + round_index * len(kinds) + kinds.index(kind)  # none reused
            result = measure(kind, port, opts, workdir)
            runs[kind].append(result)
            print(f"  {kind} ... " + (result["error"] if "error" in result else
                                      f"{common.fmt_rate(result['rate'])} calls/s, "
                                      f"{result['server_cpu_us_per_call']:.1f} us/call"), flush=True)
    rows = []
    for kind, results in runs.items():
        good = [r for r in results if "error" not in r]
        if not good:
            rows.append({"server": kind, "calls/s": "ERROR", "note": results[0]["error"]})
            continue
        cpu = statistics.median(r["server_cpu_us_per_call"] for r in good)
        rows.append({"server": kind, "rate": statistics.median(r["rate"] for r in good),
                     "calls/s": common.fmt_rate(statistics.median(r["rate"] for r in good)),
                     "server_cpu_us_per_call": cpu, "cpu": f"{cpu:.1f}",
                     "p50": common.fmt_ms(statistics.median(r["p50_ms"] for r in good)),
                     "p99": common.fmt_ms(statistics.median(r["p99_ms"] for r in good)),
                     "note": "us/call " + "/".join(f"{r['server_cpu_us_per_call']:.0f}" for r in good)
                             + (f"; {len(results) - len(good)} rounds failed" if len(good) < len(results) else "")})
    title = (f"v5 SendMessage of one {BODY_SIZE} B message, parsed and answered; {opts.clients} client processes, "
             f"{opts.inflight} calls in flight, {opts.seconds:g} s a measurement, median of {opts.repeat} rounds")
    columns = [("server", "server"), ("cpu", "server CPU us/call"), ("calls/s", "calls/s"), ("p50", "p50 ms"),
               ("p99", "p99 ms"), ("note", "note")]
    print()
    table = common.print_table(rows, columns, title=title)
    for note in notes:
        print("note:", note)
    path = common.write_results(NAME, {"options": vars(opts), "title": title, "table": table, "rows": rows,
                                       "results": runs, "notes": notes,
                                       "wall_seconds": round(time.monotonic() - started, 1)})
    print(f"\nwrote {path} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
