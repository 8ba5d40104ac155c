"""Every read of the current time in the servers goes through the injected clock (clock.py), so a
clock fault reaches all of their code. Durations handed to asyncio (wait_for, sleep) read no clock."""

import ast
from pathlib import Path

import pytest

import quorumq

PACKAGE_ROOT = Path(quorumq.__file__).parent
# Not servers, so they read the machine's clock directly: client/ is the library a user's own
# process loads (its retry deadlines and client ids live in that process), cli/ is the command a
# user runs (its waits for processes to start and stop, the times its admin commands send).
NOT_SERVERS = ("client", "cli")
TIME_READS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}
DATETIME_READS = {"now", "utcnow", "today"}


def reads_of_time(source: str) -> list[str]:
    """Each direct read of the current time in a module's source: `time.monotonic()` and the other
    TIME_READS (however the module or the function is imported), `datetime.now()` and the other
    DATETIME_READS, and `loop.time()` (any `.time()` called on an object with no arguments)."""
    tree = ast.parse(source)
    time_modules, datetime_names, time_functions = {"time"}, {"datetime", "date"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            time_modules |= {alias.asname for alias in node.names if alias.name == "time" and alias.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            time_functions |= {alias.asname or alias.name for alias in node.names if alias.name in TIME_READS}
        elif isinstance(node, ast.ImportFrom) and node.module == "datetime":
            datetime_names |= {alias.asname or alias.name for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, text = node.func, f"line {node.lineno}: {ast.unparse(node)}"
        if isinstance(func, ast.Name) and func.id in time_functions:
            found.append(text)
        elif isinstance(func, ast.Attribute):
            receiver = func.value
            receiver_name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
            if (func.attr in TIME_READS and isinstance(receiver, ast.Name) and receiver.id in time_modules) \
                    or (func.attr in DATETIME_READS and receiver_name in datetime_names) \
                    or (func.attr == "time" and not node.args and not node.keywords):
                found.append(text)
    return found


@pytest.mark.parametrize("source", [
    "import time\ntime.monotonic()",
    "import time as t\nt.time_ns()",
    "from time import perf_counter\nperf_counter()",
    "import datetime\ndatetime.datetime.now()",
    "from datetime import datetime\ndatetime.utcnow()",
    "import asyncio\nasyncio.get_running_loop().time()",
    "def f(loop):\n    return loop.time() + 1",
])
def test_the_scan_sees_each_kind_of_read(source):
    assert len(reads_of_time(source)) == 1


@pytest.mark.parametrize("source", [
    "import asyncio\nasync def f(x):\n    await asyncio.wait_for(x, timeout=1.5)",
    "import time\ntime.sleep(0.1)",
    "def f(clock):\n    return clock.monotonic() + clock.now_ms()",
])
def test_the_scan_passes_durations_and_the_clock(source):
    assert reads_of_time(source) == []


def test_only_the_clock_reads_the_time_in_the_servers():
    reads = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        if relative == Path("clock.py") or relative.parts[0] in NOT_SERVERS:
            continue
        reads += [f"{relative} {read}" for read in reads_of_time(path.read_text())]
    assert not reads, "read the time through clock.py:\n" + "\n".join(reads)
