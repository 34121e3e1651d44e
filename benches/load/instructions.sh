#!/usr/bin/env bash
# Deterministic cost per request: user-space instructions (valgrind cachegrind) and
# syscalls (strace -c) of paycred's substitution proxy and of the pingora pass-through,
# each for the same fixed number of 1 KiB POSTs (4 templates) over keep-alive connections.
# Instruction counts do not depend on what else the machine is doing.
#
#   benches/load/instructions.sh [REQUESTS]     (default 2000)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/benches/load"
n=${1:-2000}
for tool in valgrind strace curl jq openssl python3; do
  command -v "$tool" >/dev/null || { echo "instructions: $tool is missing"; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] && cp "$work"/cg.* "$KEEP"/ 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP=$(free_port); PT=$(free_port); PC=$(free_port)
(cd "$root" && cargo build --release --locked --bin paycred --example passthrough --example upstream 2>&1 | tail -1)
bin="$root/target/release/paycred"
"$root/target/release/examples/upstream" "127.0.0.1:$UP" & pids+=($!)

openssl genpkey -algorithm ed25519 -out "$work/key.pem" 2>/dev/null
openssl pkey -in "$work/key.pem" -pubout -out "$work/pub.pem"
"$bin" master-key --out "$work/master.key"
cat >"$work/paycred.yaml" <<YAML
listen: 127.0.0.1:$PC
data_dir: $work/data
master_key_file: $work/master.key
server: {threads: 1, grace_period: 0s, graceful_shutdown_timeout: 1s}
projects:
  - id: bench
    jwt: {keys: [{kid: k1, public_key_file: $work/pub.pem}], max_lifetime: 1h}
    pan: enabled
    proxy: {allowed_hosts: [127.0.0.1], allow_http: true, allow_private_networks: true}
YAML
echo "requests: $n (1 KiB body with 4 templates; the pass-through forwards the same bytes)"
python3 "$here/instructions.py" --work "$work" --requests "$n" --paycred "$bin" --config "$work/paycred.yaml" \
  --paycred-port "$PC" --passthrough "$root/target/release/examples/passthrough" --passthrough-port "$PT" \
  --upstream-port "$UP" --key "$work/key.pem" --bodies "$here/bodies.py"
