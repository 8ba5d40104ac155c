"""The official client's path through the proxy tier (issue 24), against the same path direct.

One cluster per code tree (`--code LABEL=SRC`, repeatable; default this checkout's src): a
3-replica group with quorum writes (`quorumq up --replicas 3`, SYNC_MASTER, inSyncReplicas 2,
ASYNC_FLUSH) and `--proxies` proxies on one port. Official Python clients (`--clients` processes,
bench_foundation.py's official-async worker: Producer.send_async with `--window` sends in flight
each, 1 KiB bodies) send for `--seconds`, first to the brokers direct (the name server as access
point), then through the proxies, then, with more than one, through one of them (the others
stopped: new connections reach the one left). A last row sends to bench/fake_v5_server.py, the
empty v5 server that answers without work: its CPU per message, in the proxies' column, is the
floor of what any Python gRPC server spends on a send. Reported per row: acknowledged messages per
second and the CPU seconds per message of each server process (master, slaves, proxies), read from
/proc around the run: the issue's target is a broker spending at most a fifth per message through
a proxy of what it spends serving v5 itself. The bench never asserts: it prints one table and
writes bench/results/bench_proxy.json.

    nice -n 19 .venv/bin/python bench/bench_proxy.py                  # about two minutes
    nice -n 19 .venv/bin/python bench/bench_proxy.py --seconds 20 --proxies 1
    make bench-proxy BEFORE=2852f25                                  # that commit beside this one
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import PYTHON, ROOT  # noqa: E402

FOUNDATION = common.BENCH_DIR / "bench_foundation.py"
SPREAD_TRIES = 4  # measurements through several proxies until the clients reached each (measure_spread)


def start_cluster(opts, data: Path, src: Path) -> tuple:
    argv = [PYTHON, "-m", "quorumq.cli.main", "up", "--dir", data, "--base-port", opts.base_port,
            "--replicas", "3", "--proxies", opts.proxies, "--no-dashboard",
            "--set", "metricsExporterType=DISABLE", "--set", "brokerRole=SYNC_MASTER", "--set", "inSyncReplicas=2"]
    up = common.start(argv, label="quorumq-up", log=data.parent / f"{data.name}-up.log", cwd=ROOT,
                      env=common.code_env(src))
    cluster_file = data / "cluster.json"  # written once the cluster is writable and the proxies listen
    for _ in range(900):
        if cluster_file.exists():
            return up, json.loads(cluster_file.read_text())
        if up.poll() is not None:
            break
        threading.Event().wait(0.1)
    return up, None


def free_base_port() -> int:
    """A base port whose 200 ports `up` lays out are free (other benchmarks may run)."""
    for base in range(26000, 32000, 200):
        if all(common.port_free(port) for port in range(base, base + 200)):
            return base
    raise SystemExit("no 200 free ports in 26000..32000")


def measure(opts, servers: dict[int, str], access_point: str, label: str, log: Path) -> dict:
    """`--clients` official producers at once; the CPU of `servers` (pid -> master, slave or
    proxy) read around all of them."""
    topic = f"BenchProxy{label.replace(' ', '')}"
    results: list[dict] = [{} for _ in range(opts.clients)]

    def client(index: int) -> None:
        args = {"access_point": access_point, "topic": topic, "window": opts.window, "seconds": opts.seconds}
        results[index] = common.run_worker([PYTHON, FOUNDATION, "_worker", "official-async", json.dumps(args)],
                                           label=f"{label}-{index}", timeout=opts.seconds + 90, log=log,
                                           env=common.code_env(ROOT / "src"))

    before = {pid: common.cpu_seconds(pid) for pid in servers}
    threads = [threading.Thread(target=client, args=(index,)) for index in range(opts.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    used = {pid: common.cpu_seconds(pid) - before[pid] for pid in servers}
    errors = [r["error"] for r in results if "error" in r]
    messages = sum(r.get("messages", 0) for r in results)
    seconds = max((r.get("seconds", 0) for r in results), default=0)
    row: dict = {"path": label, "messages": messages, "rate": round(messages / seconds, 1) if seconds else 0,
                 "send errors": sum(r.get("errors", 0) for r in results), "worker errors": errors}
    for role in ("master", "slave", "proxy"):
        seconds_used = sum(u for pid, u in used.items() if servers[pid] == role)
        row[f"{role} us/msg"] = round(seconds_used / messages * 1e6, 1) if messages else None
    row["cpu_seconds_by_pid"] = {f"{servers[pid]} {pid}": round(u, 3) for pid, u in used.items()}
    return row


def measure_tree(opts, workdir: Path, label: str, src: Path, log: Path, notes: list[str]) -> list[dict]:
    """Direct, through the proxies and through one proxy, on a cluster running `src`'s code."""
    name = label or "cluster"
    up, cluster = start_cluster(opts, workdir / name, src)
    rows = []
    prefix = f"{label} " if label else ""
    try:
        if cluster is None:
            raise SystemExit(f"quorumq up did not come up (see {workdir / f'{name}-up.log'})")
        processes = [p for p in cluster["processes"] if p["kind"] in ("broker", "proxy")]
        servers = {p["pid"]: "master" if p.get("role") == "master" else p["kind"] if p["kind"] == "proxy"
                   else "slave" for p in processes}
        rows.append(measure(opts, servers, cluster["access_point"], f"{prefix}direct", log))
        rows.append(measure_spread(opts, servers, cluster["proxy_access_point"], f"{prefix}{opts.proxies} proxies",
                                   log, notes))
        proxies = [pid for pid, role in servers.items() if role == "proxy"]
        if len(proxies) > 1:
            common.stop_pids(proxies[1:])
            for pid in proxies[1:]:
                del servers[pid]
            rows.append(measure(opts, servers, cluster["proxy_access_point"], f"{prefix}1 proxy", log))
    finally:
        common.stop_pid(up.pid, term_timeout=15)
        common.kill_pids([p["pid"] for p in (cluster or {}).get("processes", [])])
        shutil.rmtree(workdir / name, ignore_errors=True)  # its commit logs take gigabytes
    direct = rows[0]["master us/msg"]
    for row in rows[1:]:
        if direct and row["master us/msg"]:
            notes.append(f"{row['path']}: the master's CPU per message is {row['master us/msg'] / direct:.2f} of "
                         "direct (target <= 0.20)" + _proxy_split(row))
    return rows


def measure_spread(opts, servers: dict[int, str], access_point: str, label: str, log: Path,
                   notes: list[str]) -> dict:
    """`measure` through several proxies, again (up to SPREAD_TRIES in all) while one proxy took
    less than half its even share of their CPU: SO_REUSEPORT spreads the clients' connections by a
    hash, so a few clients may all land on one proxy, and the row would measure one proxy's fuller
    merged calls, not several proxies'."""
    for attempt in range(1, SPREAD_TRIES + 1):
        row = measure(opts, servers, access_point, label, log)
        shares = _proxy_shares(row)
        if not shares or min(shares) >= 0.5 / len(shares):
            break
        notes.append(f"{label}, try {attempt} of {SPREAD_TRIES}{_proxy_split(row)}"
                     + ("; measured again" if attempt < SPREAD_TRIES else "; kept, the last try"))
    return row


def _proxy_shares(row: dict) -> list[float]:
    """Each proxy's share of the proxies' CPU in the row (none with fewer than two proxies)."""
    used = [seconds for name, seconds in row["cpu_seconds_by_pid"].items() if name.startswith("proxy")]
    return [seconds / sum(used) for seconds in used] if len(used) > 1 and sum(used) else []


def _proxy_split(row: dict) -> str:
    shares = _proxy_shares(row)
    return "; the proxies' CPU split " + "/".join(f"{share:.0%}" for share in shares) if shares else ""


def measure_empty_server(opts, workdir: Path, log: Path) -> dict:
    """The official clients against bench/fake_v5_server.py, which answers and does nothing else."""
    port = opts.base_port + 190  # above what `up` lays out
    server = common.start([PYTHON, common.BENCH_DIR / "fake_v5_server.py", "--port", port], label="empty-server",
                          log=workdir / "empty-server.log", env=common.code_env(ROOT / "src"))
    try:
        if not common.wait_port(port, proc=server):
            raise SystemExit(f"fake_v5_server did not listen (see {workdir / 'empty-server.log'})")
        return measure(opts, {server.pid: "proxy"}, f"{common.HOST}:{port}", "empty gRPC server", log)
    finally:
        common.stop_pid(server.pid, term_timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0, help="each measurement's length")
    parser.add_argument("--clients", type=int, default=2, help="official client processes")
    parser.add_argument("--window", type=int, default=32, help="sends in flight per client process")
    parser.add_argument("--proxies", type=int, default=2)
    parser.add_argument("--base-port", type=int, default=0, help="default: the first free range from 26000")
    parser.add_argument("--code", action="append", type=common.labelled_source, default=[],
                        help="LABEL=SRC: a cluster on that tree's code (repeatable; default this checkout's src)")
    opts = parser.parse_args()
    opts.base_port = opts.base_port or free_base_port()
    codes = opts.code or [("", ROOT / "src")]
    common.install_signal_handlers()
    notes = common.settle(0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    log = workdir / "workers.log"
    rows = []
    for label, src in codes:
        rows += measure_tree(opts, workdir, label, src, log, notes)
    rows.append(measure_empty_server(opts, workdir, log))
    opts.code = [f"{label}={src}" for label, src in codes]
    common.print_table(rows, [("path", "path"), ("rate", "msg/s"), ("master us/msg", "master us/msg"),
                              ("slave us/msg", "slaves us/msg"), ("proxy us/msg", "proxies us/msg"),
                              ("send errors", "send errors")],
                       title=f"official Python client, {opts.clients} x {opts.window} send_async in flight, "
                             f"3 replicas, inSyncReplicas 2")
    for note in notes:
        print(f"note: {note}")
    path = common.write_results("bench_proxy", {"options": vars(opts), "rows": rows, "notes": notes,
                                                "workdir": str(workdir)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
