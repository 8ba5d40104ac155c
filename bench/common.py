"""Small helpers shared by the benchmarks in bench/.

Processes are started in their own session and stopped by pid (never by name); every process started
through `start()` is also stopped at interpreter exit, on SIGTERM/SIGINT of the bench, or when the
bench fails. Benchmarks never assert: they print a table and write JSON to bench/results/<name>.json.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import functools
import json
import math
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
PYTHON = sys.executable
HOST = "127.0.0.1"

# --------------------------------------------------------------------------------------------------
# Processes


_started: dict[int, str] = {}  # pid -> label, for every process we started and have not reaped yet


def start(argv: Sequence[str], *, label: str, log: Path | None = None, cwd: Path | None = None,
          env: dict[str, str] | None = None, cpus: str | None = None) -> subprocess.Popen:
    """Start a process in its own session (so it can be stopped with its children), optionally pinned
    with `taskset -c CPUS`, with stdout and stderr going to `log` (or /dev/null)."""
    argv = [str(a) for a in argv]
    if cpus is not None:
        argv = ["taskset", "-c", cpus, *argv]
    out = open(log, "ab") if log is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env, start_new_session=True)
    finally:
        if log is not None:
            out.close()
    _started[proc.pid] = label
    return proc


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop_pid(pid: int, *, term_timeout: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Send `sig` to one pid, wait up to `term_timeout` for it to go, then SIGKILL it."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        _started.pop(pid, None)
        return
    deadline = time.monotonic() + term_timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            break
        time.sleep(0.05)
    else:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for _ in range(100):
            _reap(pid)
            if not pid_alive(pid):
                break
            time.sleep(0.05)
    _started.pop(pid, None)


def stop_pids(pids: Iterable[int], *, term_timeout: float = 10.0) -> None:
    for pid in pids:
        stop_pid(pid, term_timeout=term_timeout)


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL whatever of `pids` is still alive (leftovers after a graceful stop)."""
    for pid in pids:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(pid)
        _started.pop(pid, None)


def stop_all_started() -> None:
    for pid in list(_started):
        stop_pid(pid, term_timeout=3.0)


def _on_signal(signum, frame):  # noqa: ARG001
    stop_all_started()
    raise SystemExit(128 + signum)


atexit.register(stop_all_started)


def install_signal_handlers() -> None:
    """Stop every started process when the bench itself gets SIGTERM or SIGINT."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def pin(pid: int, cpus: str | None) -> None:
    """Pin every thread of a running process to `cpus` (None: allow all cpus)."""
    cpus = cpus or f"0-{os.cpu_count() - 1}"
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_port(port: int, host: str = HOST, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def port_free(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]), idle


def cpu_busy(interval: float = 0.3, exclude: Iterable[int] = ()) -> float:
    """Fraction of all cpus busy over `interval` seconds (0..1), from /proc/stat, not counting the
    processes in `exclude` (e.g. the servers under test)."""
    exclude = list(exclude)
    own0 = sum(cpu_seconds(p) for p in exclude)
    total0, idle0 = _cpu_times()
    time.sleep(interval)
    total1, idle1 = _cpu_times()
    own1 = sum(cpu_seconds(p) for p in exclude)
    ticks = os.sysconf("SC_CLK_TCK")
    busy = (total1 - total0) - (idle1 - idle0) - (own1 - own0) * ticks
    return round(max(0.0, busy / max(1, total1 - total0)), 2)


def wait_quiet(max_wait: float, threshold: float = 0.2, interval: float = 1.0) -> float:
    """Wait up to `max_wait` seconds for the machine to be mostly idle; returns the last busy share."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy(interval)
    while busy > threshold and time.monotonic() < deadline:
        busy = cpu_busy(interval)
    return busy


def settle(max_wait: float) -> list[str]:
    """Before a measurement: wait up to `max_wait` s for idle cpus (0: not at all); the notes to
    print beside the figures when other work shares the cpus."""
    if max_wait:
        print(f"waiting up to {max_wait:g} s for idle cpus ...", flush=True)
        wait_quiet(max_wait)
    load1 = float(Path("/proc/loadavg").read_text().split()[0])
    return [f"load average {load1:.2f} when the bench started: other work shares these cpus"] if load1 > 0.5 else []


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# --------------------------------------------------------------------------------------------------
# Which quorumq code runs: a bench measures this checkout's src, or older trees beside it (git worktrees,
# `make bench-... BEFORE=COMMIT`), each selected by PYTHONPATH, which `quorumq up`'s children inherit.


def source_dir(text: str) -> Path:
    """argparse type: a directory holding the quorumq package (a tree's src)."""
    if not (Path(text) / "quorumq").is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory holding the quorumq package")
    return Path(text).resolve()


def labelled_source(text: str) -> tuple[str, Path]:
    """argparse type of `--code LABEL=SRC_DIR`."""
    label, _, directory = text.partition("=")
    if not label:
        raise argparse.ArgumentTypeError(f"{text!r} is LABEL=SRC_DIR, a directory holding the quorumq package")
    return label, source_dir(directory)


def code_env(src: Path) -> dict[str, str]:
    """This environment with `src` first on PYTHONPATH: a process started with it runs that tree's code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    return env


@functools.cache
def quiet_up_options(src: Path) -> tuple[str, ...]:
    """`quorumq up` options for no dashboard and no metrics, as the published figures were measured,
    as far as the tree at `src` has them (older trees have neither): whatever its `up --help` names."""
    done = subprocess.run([PYTHON, "-m", "quorumq.cli.main", "up", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=code_env(src), timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"quorumq up --help of {src} failed: {done.stderr.strip()[-1000:]}")
    return ((("--no-dashboard",) if "--no-dashboard" in done.stdout else ())
            + (("--set", "metricsExporterType=DISABLE") if "metricsExporterType" in done.stdout else ()))


# --------------------------------------------------------------------------------------------------
# Command-line options the benchmarks that start `quorumq up` share


def add_up_options(parser: argparse.ArgumentParser, base_port: int, ports: str) -> None:
    """--base-port (`ports`: what each measurement takes from it), --set, --wait-quiet, --workdir, --keep."""
    parser.add_argument("--base-port", type=int, default=base_port, help=f"{ports} (default {base_port})")
    parser.add_argument("--set", dest="quorumq_set", action="append", default=[], metavar="KEY=VALUE",
                        type=lambda kv: f"--set={kv}", help="extra --set for every quorumq up")
    parser.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                        help="first wait up to SECONDS for the cpus to be mostly idle (shared machines)")
    parser.add_argument("--workdir", help="where stores and logs go (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs")


def add_send_options(parser: argparse.ArgumentParser, inflight: int) -> None:
    """--seconds, --repeat, --batch, --inflight and --py-spy of the benchmarks that measure quorumq's
    producer (bench_foundation's workers)."""
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each measurement (default 4)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of everything; the table shows medians")
    parser.add_argument("--batch", type=int, default=256, help="messages per quorumq send_batch request")
    parser.add_argument("--inflight", type=int, default=inflight,
                        help=f"quorumq send_batch requests in flight (default {inflight})")
    parser.add_argument("--py-spy", metavar="PATH",
                        help="profile the quorumq measurements (broker and client) with this py-spy binary; "
                             "sampling slows the measured processes a little")


# --------------------------------------------------------------------------------------------------
# Statistics and output


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (nan when empty)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(seconds: Iterable[float]) -> dict:
    """p50/p99/max in milliseconds of per-operation latencies given in seconds."""
    values = sorted(seconds)
    return {
        "samples": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 3),
        "p99_ms": round(percentile(values, 99) * 1000, 3),
        "max_ms": round(values[-1] * 1000, 3) if values else float("nan"),
    }


def fmt_rate(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:,.0f}"


def fmt_ms(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.2f}"


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]]) -> str:
    """A plain-text (and Markdown-compatible) table; `columns` is [(key, heading), ...]."""
    cells = [[h for _, h in columns]]
    for row in rows:
        cells.append(["" if row.get(k) is None else str(row.get(k)) for k, _ in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def print_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]], title: str | None = None) -> str:
    text = format_table(rows, columns)
    if title:
        print(f"\n{title}")
    print(text, flush=True)
    return text


def _run_text(argv: Sequence[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout or out.stderr).strip() or None


def _package_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_info(packages: Sequence[str] = ("grpcio", "protobuf", "rocketmq-python-client", "nats-py"),
                 tools: dict[str, Sequence[str]] | None = None) -> dict:
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_total = None
    try:
        with open("/proc/meminfo") as f:
            mem_total = f.readline().split()[1] + " kB"
    except OSError:
        pass
    info = {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "memory": mem_total,
        "kernel": platform.release(),
        "os": _run_text(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "python": sys.version.split()[0],
        "packages": {p: _package_version(p) for p in packages},
        "git_commit": _run_text(["git", "rev-parse", "HEAD"]),
        "git_dirty": bool(_run_text(["git", "status", "--porcelain", "--untracked-files=no"])),
        "loadavg": _run_text(["cat", "/proc/loadavg"]),
        "filesystem_of_tmp": _run_text(["stat", "-f", "-c", "%T", "/tmp"]),
    }
    for name, argv in (tools or {}).items():
        info[name] = _run_text(argv)
    return info


def command_line() -> str:
    """The exact command that ran this bench, as one shell line (with the working directory)."""
    return f"cd {shlex.quote(os.getcwd())} && {shlex.join([sys.executable, *sys.argv])}"


def write_results(name: str, data: dict, *, machine: dict | None = None, path: Path | None = None) -> Path:
    path = path or RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "bench": name,
        "command": command_line(),
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine if machine is not None else machine_info(),
        **data,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------------------
# Worker subprocesses: each client measurement runs in its own fresh Python process (optionally pinned)
# and hands its result back as one JSON line prefixed with RESULT_PREFIX on stdout.

RESULT_PREFIX = "@@RESULT "


def emit_result(result: dict) -> None:
    sys.stdout.write(RESULT_PREFIX + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


def run_worker(argv: Sequence[str], *, label: str, timeout: float, log: Path, cpus: str | None = None,
               env: dict[str, str] | None = None) -> dict:
    """Run a worker process to completion (killing it at `timeout`) and return its result dict, or
    {"error": ...} when it failed. The worker's stderr goes to `log`."""
    argv = [str(a) for a in argv]
    if cpus is not None:
        argv = ["taskset", "-c", cpus, *argv]
    with open(log, "ab") as err:
        err.write(f"\n=== {label}: {shlex.join(argv)}\n".encode())
        err.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=ROOT, env=env, start_new_session=True)
        _started[proc.pid] = label
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, _ = proc.communicate()
            _started.pop(proc.pid, None)
            return {"error": f"{label}: timed out after {timeout:.0f} s (see {log})"}
        _started.pop(proc.pid, None)
    for line in reversed(out.decode(errors="replace").splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return {"error": f"{label}: exit code {proc.returncode}, no result (see {log})"}


# --------------------------------------------------------------------------------------------------
# Optional profiles with py-spy (not a project dependency: pass its path, e.g. from `pip install py-spy`
# in a separate virtualenv). Output is py-spy's "raw" format: collapsed stacks, one "a;b;c COUNT" a line.


def py_spy_attach(py_spy: str, pid: int, out: Path, rate: int = 200) -> subprocess.Popen:
    """Start sampling a running process (all its threads, native frames off); stop with py_spy_stop."""
    return start([py_spy, "record", "--pid", pid, "--format", "raw", "--rate", rate, "--output", out,
                  "--nonblocking"], label=f"py-spy {pid}", log=out.with_suffix(".log"))


def py_spy_stop(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """py-spy writes its output on SIGINT."""
    stop_pid(proc.pid, term_timeout=timeout, sig=signal.SIGINT)


def py_spy_wrap(py_spy: str, out: Path, argv: Sequence[str], rate: int = 200) -> list[str]:
    """argv that runs `argv` under py-spy record (for a worker process)."""
    return [py_spy, "record", "--format", "raw", "--rate", str(rate), "--output", str(out),
            "--nonblocking", "--", *map(str, argv)]


def summarize_collapsed(path: Path, top: int = 15) -> dict:
    """Top functions by self samples and by inclusive samples from a collapsed-stack file."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    try:
        lines = path.read_text(errors="replace").splitlines()  # frames may hold any bytes
    except OSError:
        return {"error": f"no profile at {path}"}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        if frames and frames[0].startswith(("process ", "thread ")):
            frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for f in set(frames):
            incl[f] = incl.get(f, 0) + n

    def ranked(d):
        return [{"function": f, "share": round(c / total, 3), "samples": c}
                for f, c in sorted(d.items(), key=lambda kv: -kv[1])[:top]]

    return {"samples": total, "self": ranked(own), "inclusive": ranked(incl), "file": str(path)}
