"""The official client's path through the proxy tier (issue 24), against the same path direct.

One cluster: a 3-replica group with quorum writes (`quorumq up --replicas 3`, SYNC_MASTER,
inSyncReplicas 2, ASYNC_FLUSH) and `--proxies` proxies on one port. Official Python clients
(`--clients` processes, bench_foundation.py's official-async worker: Producer.send_async with
`--window` sends in flight each, 1 KiB bodies) send for `--seconds`, first to the brokers direct
(the name server as access point), then through the proxies. Reported per row: acknowledged
messages per second and the CPU seconds per message of each server process (master, slaves,
proxies), read from /proc around the run: the issue's target is a broker spending at most a fifth
per message through a proxy of what it spends serving v5 itself. The bench never asserts: it
prints one table and writes bench/results/bench_proxy.json.

    nice -n 19 .venv/bin/python bench/bench_proxy.py                  # about a minute
    nice -n 19 .venv/bin/python bench/bench_proxy.py --seconds 20 --proxies 1
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import PYTHON, ROOT  # noqa: E402

FOUNDATION = common.BENCH_DIR / "bench_foundation.py"


def start_cluster(opts, data: Path) -> tuple:
    argv = [PYTHON, "-m", "quorumq.cli.main", "up", "--dir", data, "--base-port", opts.base_port,
            "--replicas", "3", "--proxies", opts.proxies, "--no-dashboard",
            "--set", "metricsExporterType=DISABLE", "--set", "brokerRole=SYNC_MASTER", "--set", "inSyncReplicas=2"]
    up = common.start(argv, label="quorumq-up", log=data.parent / "up.log", cwd=ROOT,
                      env=common.code_env(ROOT / "src"))
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


def measure(opts, cluster: dict, access_point: str, label: str, log: Path) -> dict:
    """`--clients` official producers at once; the servers' CPU read around all of them."""
    servers = {p["pid"]: ("master" if p.get("role") == "master" else p["kind"] if p["kind"] == "proxy" else "slave")
               for p in cluster["processes"] if p["kind"] in ("broker", "proxy")}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0, help="each measurement's length")
    parser.add_argument("--clients", type=int, default=2, help="official client processes")
    parser.add_argument("--window", type=int, default=32, help="sends in flight per client process")
    parser.add_argument("--proxies", type=int, default=2)
    parser.add_argument("--base-port", type=int, default=0, help="default: the first free range from 26000")
    opts = parser.parse_args()
    opts.base_port = opts.base_port or free_base_port()
    common.install_signal_handlers()
    notes = common.settle(0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    up, cluster = start_cluster(opts, workdir / "cluster")
    rows = []
    try:
        if cluster is None:
            raise SystemExit(f"quorumq up did not come up (see {workdir / 'up.log'})")
        log = workdir / "workers.log"
        rows.append(measure(opts, cluster, cluster["access_point"], "direct", log))
        rows.append(measure(opts, cluster, cluster["proxy_access_point"], f"{opts.proxies} proxies", log))
    finally:
        common.stop_pid(up.pid, term_timeout=15)
        common.kill_pids([p["pid"] for p in (cluster or {}).get("processes", [])])
    direct, proxied = rows
    if direct["master us/msg"] and proxied["master us/msg"]:
        share = proxied["master us/msg"] / direct["master us/msg"]
        notes.append(f"master CPU per message through the proxies: {share:.2f} of direct (target <= 0.20)")
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
