#!/usr/bin/env bash
# `make run`: start a local cluster, show the official RocketMQ client sending and receiving on it,
# then keep the cluster in the foreground until Ctrl-C (or stop it at once with DEMO_EXIT=1).
# Without arguments the cluster is one replica group of three: a SYNC_MASTER that acknowledges a
# send once two copies hold it; arguments replace that layout (they go to `quorumq up`).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${DEMO_DIR:-run/demo}
BASE_PORT=${DEMO_BASE_PORT:-20000}
mkdir -p "$DIR"
rm -f "$DIR/cluster.json"  # `up` writes it once the cluster is writable

if [ $# -eq 0 ]; then
    set -- --replicas 3 --set brokerRole=SYNC_MASTER --set inSyncReplicas=2
fi
.venv/bin/quorumq up --dir "$DIR" --base-port "$BASE_PORT" "$@" &
UP_PID=$!
stop_cluster() {
    kill -TERM "$UP_PID" 2>/dev/null || true
    wait "$UP_PID" 2>/dev/null || true
}
trap stop_cluster EXIT

for _ in $(seq 600); do
    [ -f "$DIR/cluster.json" ] && break
    kill -0 "$UP_PID" 2>/dev/null || { echo "demo: quorumq up failed (see above)" >&2; exit 1; }
    sleep 0.1
done
[ -f "$DIR/cluster.json" ] || { echo "demo: the cluster did not come up within 60 s" >&2; exit 1; }

# With `--tls` the official client and quorumq's trust the cluster's CA, which gRPC reads at start.
CA=$(.venv/bin/python -c 'import json, sys; print(json.load(open(sys.argv[1])).get("ca", ""))' "$DIR/cluster.json")
if [ -n "$CA" ]; then
    export GRPC_DEFAULT_SSL_ROOTS_FILE_PATH="$CA" QUORUMQ_TLS_CA="$CA"
fi
.venv/bin/python scripts/demo.py "$DIR/cluster.json"

if [ "${DEMO_EXIT:-0}" = 1 ]; then
    exit 0
fi
echo
echo "The cluster keeps running; its dashboard is at http://127.0.0.1:$((BASE_PORT + 9))/ (unless --no-dashboard)"
echo "try: ${CA:+QUORUMQ_TLS_CA=$CA }.venv/bin/quorumq admin clusterList -n 127.0.0.1:$BASE_PORT"
echo "Ctrl-C stops it."
wait "$UP_PID"
