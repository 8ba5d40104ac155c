"""A quorumq process starts its children with a preexec_fn (the replicator's Spark gateway, the
processes of `quorumq up`) while its gRPC channels are busy. With grpcio's fork support on, about
one such child in fifty died before its exec (grpc/grpc#43055): a replicator driver then stopped
at start with "Java gateway process exited before sending its port number"."""

import subprocess
import sys

FORKS = 300  # without the fix, all of them starting has a chance of about 0.2%

CHILD = f"""
import subprocess, threading
from concurrent import futures
import quorumq  # first, as in every quorumq process
import grpc

server = grpc.server(futures.ThreadPoolExecutor(2))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
call = grpc.insecure_channel(f"127.0.0.1:{{port}}").unary_unary("/quorumq.Test/Busy")
done = threading.Event()

def busy():
    while not done.is_set():
        try:
            call(b"", timeout=0.05)
        except grpc.RpcError:
            pass

threading.Thread(target=busy, daemon=True).start()
failed = sum(subprocess.Popen(["true"], preexec_fn=lambda: None).wait() != 0 for _ in range({FORKS}))
done.set()
print(failed)
"""


def test_children_started_with_a_preexec_fn_beside_busy_channels_all_start():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", f"{done.stdout.strip()} of {FORKS} children died before their exec"
