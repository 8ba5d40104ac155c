"""Security benchmark (issue 22): what authentication and TLS cost a sending client, side by side in
one run. One broker with its name server (`quorumq up`, ASYNC_FLUSH, no dashboard, no metrics, 64 MiB
segments), 1 KiB bodies, in four configurations:

  off/off   neither (the baseline)
  on/off    authenticationEnabled=true (initAuthenticationUser, innerClientAuthenticationCredentials):
            every client signs every call with the init user's credentials
  off/on    `quorumq up --tls`: tls.server.mode=enforcing with a throwaway CA and certificate
            (cli/certs.py); the clients trust the CA (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH and
            tls_enable=True for the official client, QUORUMQ_TLS_CA for quorumq's)
  on/on     both

and two workloads, each in a fresh worker process for `--seconds` after its warm-up:

  official  the official rocketmq-python-client's Producer.send (sync), `--threads` threads sharing
            one Producer (bench_timers.py's worker): an HMAC-SHA1 over the date-time a call
  batch     quorumq's Producer.send_batch, `--batch` messages a request, `--inflight` requests in
            flight (bench_foundation.py's worker): an HMAC-SHA256 over the request's bytes a call

Each round starts a fresh cluster for each configuration in turn (round r begins with the r-th
configuration, so that none always goes first), runs both workloads on it and stops it: machine
noise falls on every configuration alike. Reported per workload and configuration: the median
over the rounds of acknowledged messages a second and of the broker's CPU (user + system, from
/proc/PID/stat over the measurement) a message, and the median of each round's ratio to that
round's off/off. Targets (issue 22): authentication costs at most 10% of the throughput (on/off at
least 0.90x), TLS at most 30% (off/on at least 0.70x); on/on is held to both costs compounded
(0.63x).

Servers are stopped by pid at the end, also on failure or SIGINT. The bench never asserts: it prints
one table and writes bench/results/bench_security.json.

    .venv/bin/python bench/bench_security.py --wait-quiet 30     # what make bench-security runs, about 10 minutes
    .venv/bin/python bench/bench_security.py --repeat 1 --seconds 1          # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_foundation as bf  # noqa: E402
import bench_replicas as br  # noqa: E402
import bench_timers  # noqa: E402
import common  # noqa: E402
from quorumq.tls import CA_VARIABLE  # noqa: E402

NAME = "bench_security"
# label -> (authentication, TLS); the first is the baseline every other stands against.
CONFIGS = {"off/off": (False, False), "on/off": (True, False), "off/on": (False, True), "on/on": (True, True)}
BASELINE = "off/off"
# label -> (least ratio to the baseline's msg/s, what it stands for)
TARGETS = {"on/off": (0.90, "authentication costs <= 10%"), "off/on": (0.70, "TLS costs <= 30%"),
           "on/on": (0.90 * 0.70, "both costs compounded")}
USER = ("bench", "bench-secret-4711")  # initAuthenticationUser: the clients sign with it
INNER = ("bench-inner", "bench-inner-secret-4712")  # innerClientAuthenticationCredentials: the members'
WORKLOADS = {  # key -> worker kind, topic, what the table calls it
    "official": ("send-sync", "BenchSecurityOfficial", "official Producer.send (sync, {threads} threads)"),
    "batch": ("qq-batch", "BenchSecurityBatch", "quorumq Producer.send_batch ({batch}/request, {inflight} in flight)"),
}
WORKERS = {"send-sync": bench_timers.w_send_sync, "qq-batch": bf.w_qq_batch}


class Bench(br.Bench):
    worker_script = Path(__file__).resolve()

    def __init__(self, opts):
        opts.workdir = opts.workdir or tempfile.mkdtemp(prefix="bench-security-")
        super().__init__(opts)
        self.runs: dict[tuple[str, str], list[dict]] = {}  # (workload, configuration) -> a result a round

    def up_args(self, authentication: bool, tls: bool) -> list[str]:
        keys = {"metricsExporterType": "DISABLE", "mappedFileSizeCommitLog": str(self.opts.segment_bytes)}
        if authentication:
            keys.update(authenticationEnabled="true",
                        initAuthenticationUser=json.dumps({"username": USER[0], "password": USER[1]}),
                        innerClientAuthenticationCredentials=json.dumps({"accessKey": INNER[0],
                                                                         "secretKey": INNER[1]}))
        args = ["--no-dashboard", *(["--tls"] if tls else [])]
        for key, value in keys.items():
            args += ["--set", f"{key}={value}"]
        return args + list(self.opts.quorumq_set)

    def measure(self, label: str, port: int) -> None:
        """A fresh cluster in configuration `label`, both workloads on it, then stopped."""
        authentication, tls = CONFIGS[label]
        name = "security-" + label.replace("/", "-")
        print(f"{label} (authentication {'on' if authentication else 'off'}, TLS {'on' if tls else 'off'}; "
              f"base port {port})", flush=True)
        up, cluster, data = self.start_quorumq(name, port, self.up_args(authentication, tls))
        try:
            if cluster is None:
                for workload in WORKLOADS:
                    self.runs.setdefault((workload, label), []).append(
                        {"error": f"quorumq up did not come up (see {self.workdir / f'{name}-up.log'})"})
                return
            base = {"access_point": cluster["access_point"], "body_size": bf.BODY_SIZE,
                    "server_pids": [p["pid"] for p in cluster["processes"] if p["kind"] == "broker"],
                    **({"credentials": list(USER)} if authentication else {})}
            env = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": cluster["ca"], CA_VARIABLE: cluster["ca"]} if tls else {}
            opts = self.opts
            own = {"official": {"threads": opts.threads, "transaction": False, "tls": tls},
                   "batch": {"batch": opts.batch, "inflight": opts.inflight}}
            for workload, (kind, topic, _) in WORKLOADS.items():
                res = self.worker(f"{workload}_{name}", kind, {**base, **own[workload], "topic": topic}, env=env,
                                  profile=True, timeout=opts.seconds + 120)
                self.runs.setdefault((workload, label), []).append({**res, "round": self.round})
        finally:
            self.stop_quorumq(up, cluster, data)

    def run(self):
        opts = self.opts
        started = time.monotonic()
        self.notes += common.settle(opts.wait_quiet)
        labels = list(CONFIGS)
        try:
            for self.round in range(opts.repeat):
                print(f"--- round {self.round + 1} of {opts.repeat}", flush=True)
                for index in range(len(labels)):
                    label = labels[(self.round + index) % len(labels)]
                    self.measure(label, opts.base_port + br.PORT_BLOCK * labels.index(label))
        finally:
            common.stop_all_started()
        self.report_security(started)

    # ---- the table ----------------------------------------------------------------------------------

    def ratios(self, workload: str, label: str, figure: str) -> list[float]:
        """Each round's `figure` of `label` over the baseline's of the same round (rounds where both counted)."""
        base = {r["round"]: r.get(figure) for r in self.runs.get((workload, BASELINE), []) if counted(r)}
        return [r[figure] / base[r["round"]] for r in self.runs.get((workload, label), [])
                if counted(r) and base.get(r["round"])]

    def table_rows(self) -> list[dict]:
        opts, rows = self.opts, []
        for workload, (_, _, described) in WORKLOADS.items():
            measurement = described.format(threads=opts.threads, batch=opts.batch, inflight=opts.inflight)
            for label, (authentication, tls) in CONFIGS.items():
                runs = self.runs.get((workload, label), [])
                good = [r for r in runs if counted(r)]
                row = {"measurement": measurement, "authentication": "on" if authentication else "off",
                       "tls": "on" if tls else "off", "rates": [r.get("rate") for r in runs]}
                failed = [r.get("error") or f"errors {r.get('errors')}" for r in runs if not counted(r)]
                note = [f"rates {'/'.join(common.fmt_rate(r['rate']) for r in good)}"] if good else []
                if failed:
                    note.append(f"{len(failed)} of {len(runs)} rounds not counted: {failed[0]}")
                if not good:
                    rows.append({**row, "msg/s": "ERROR", "note": "; ".join(note)})
                    continue
                rate = statistics.median(r["rate"] for r in good)
                cpu = statistics.median(r["server_cpu_us_per_msg"] for r in good)
                row.update({"msg/s": common.fmt_rate(rate), "rate": rate, "server us/msg": f"{cpu:.1f}",
                            "server_cpu_us_per_msg": cpu})
                if all("client_cpu_us_per_msg" in r for r in good):  # quorumq's worker measures its own
                    note.append(f"client CPU {statistics.median(r['client_cpu_us_per_msg'] for r in good):.1f} "
                                "us/msg")
                if label != BASELINE:
                    rate_ratios, cpu_ratios = (self.ratios(workload, label, f)
                                               for f in ("rate", "server_cpu_us_per_msg"))
                    if rate_ratios:
                        ratio = statistics.median(rate_ratios)
                        least, meaning = TARGETS[label]
                        row.update({"vs msg/s": f"{ratio:.2f}x", "vs cpu": f"{statistics.median(cpu_ratios):.2f}x",
                                    "ratio": ratio, "target": f">= {least:.2f}x ({meaning}) "
                                                              + ("met" if ratio >= least else "MISSED")})
                        note.append("ratios " + "/".join(f"{x:.2f}" for x in rate_ratios))
                rows.append({**row, "note": "; ".join(note)})
        return rows

    def report_security(self, started: float) -> None:
        opts = self.opts
        columns = [("measurement", "workload"), ("authentication", "authentication"), ("tls", "TLS"),
                   ("msg/s", "msg/s"), ("server us/msg", "broker CPU us/msg"), ("vs msg/s", "msg/s vs off/off"),
                   ("vs cpu", "CPU/msg vs off/off"), ("target", "target"), ("note", "note")]
        title = (f"{bf.BODY_SIZE} B bodies, one broker and its name server, ASYNC_FLUSH, {opts.seconds:g} s a "
                 f"measurement, median of {opts.repeat} rounds (ratios: median of each round's ratio), "
                 f"{os.cpu_count()} cpus shared by clients and servers")
        rows = self.table_rows()
        print()
        table = common.print_table(rows, columns, title=title)
        for note in self.notes:
            print("note:", note)
        path = common.write_results(NAME, {
            "options": vars(opts), "title": title, "table": table, "rows": rows,
            "targets": {label: f">= {least:.2f}x the off/off msg/s ({meaning})"
                        for label, (least, meaning) in TARGETS.items()},
            "results": {f"{workload} {label}": runs for (workload, label), runs in self.runs.items()},
            "server_commands": self.commands, "notes": self.notes, "workdir": str(self.workdir),
            "wall_seconds": round(time.monotonic() - started, 1)})
        print(f"\nwrote {path} (worker logs in {self.workdir}; {time.monotonic() - started:.0f} s)")


def counted(res: dict) -> bool:
    """A round's figure counts when its worker finished and no send failed."""
    return "error" not in res and not res.get("errors") and bool(res.get("rate"))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "_worker":
        bf.worker_main(sys.argv[2], sys.argv[3], WORKERS)
        return
    p = argparse.ArgumentParser(description="quorumq security benchmark (see the module docstring)")
    common.add_up_options(p, 62000, "configuration k (off/off, on/off, off/on, on/on) uses P+200k..P+200k+199")
    common.add_send_options(p, inflight=4)
    p.set_defaults(seconds=8.0, repeat=7)
    p.add_argument("--threads", type=int, default=4, help="threads sharing the official Producer (default 4)")
    br.add_segment_option(p)
    opts = p.parse_args()
    common.install_signal_handlers()
    Bench(opts).run()


if __name__ == "__main__":
    main()
