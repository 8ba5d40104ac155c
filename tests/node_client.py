"""The official Node.js client (tests/node/client.js, run with `node`) as a Python object: one node
process per NodeClient, driven by JSON lines, for the tests and the benchmarks.

    with NodeClient(log_path) as node:
        node.call("producer", access_point=..., topics=[topic])
        message_id = node.call("send", topic=topic, body="hello", tag="A")["message_id"]

`call` sends one command and returns its answer, raising NodeError with the client's message when
it failed. `send_every` events arrive in `events` as they end. The process is stopped by its pid
when the block ends, whatever happened.
"""

import json
import signal
import subprocess
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = ROOT / "tests" / "node"
SCRIPT = NODE_DIR / "client.js"
CALL_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class NodeError(Exception):
    """A command the Node.js client failed: the client's own error message."""


class NodeClient:
    def __init__(self, log_path: Path) -> None:
        if not (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
            raise RuntimeError(f"the Node.js client is not installed in {NODE_DIR}: run `make setup`")
        self.log_path = log_path
        self.events: list[dict] = []
        self._answers: dict[int, dict] = {}
        self._changed = threading.Condition()
        self._next_id = 0
        self._log = open(log_path, "ab")
        self._process = subprocess.Popen(["node", str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._log, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, name="node-client-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._process.stdout:
            entry = json.loads(line)
            with self._changed:
                if "event" in entry:
                    self.events.append(entry)
                else:
                    self._answers[entry["id"]] = entry
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def call(self, op: str, timeout: float = CALL_TIMEOUT_S, **args) -> dict:
        with self._changed:
            command_id = self._next_id
            self._next_id += 1
        self._process.stdin.write(json.dumps({"id": command_id, "op": op, **args}) + "\n")
        self._process.stdin.flush()
        with self._changed:
            if not self._changed.wait_for(lambda: command_id in self._answers or self._process.poll() is not None,
                                          timeout):
                raise TimeoutError(f"the Node.js client did not answer {op} within {timeout} s (log: {self.log_path})")
            answer = self._answers.pop(command_id, None)
        if answer is None:
            raise RuntimeError(f"the Node.js client exited during {op} (log: {self.log_path})")
        if not answer.pop("ok"):
            raise NodeError(answer["error"])
        answer.pop("id")
        return answer

    def wait_events(self, condition, timeout: float, what: str) -> list[dict]:
        """Wait until condition(events) holds; return the events so far."""
        with self._changed:
            if not self._changed.wait_for(lambda: condition(self.events), timeout):
                raise AssertionError(f"{what} not true within {timeout} s (log: {self.log_path})")
            return list(self.events)

    def close(self) -> None:
        try:
            if self._process.poll() is None:
                self.call("shutdown", timeout=STOP_TIMEOUT_S)
            self._process.wait(timeout=STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a client that does not stop by itself is killed below
            pass
        finally:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGKILL)
                self._process.wait()
            self._log.close()

    def __enter__(self) -> "NodeClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
