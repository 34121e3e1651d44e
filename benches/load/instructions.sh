#!/usr/bin/env bash
# Deterministic cost per request: user-space instructions (valgrind cachegrind) and
# syscalls (strace -c) of paycred's substitution proxy and of the pingora pass-through,
# each for the same fixed number of 1 KiB POSTs (4 templates) over keep-alive connections.
# The request path's count does not depend on what else the machine is doing; paycred's
# total does a little, through how many requests share an audit batch (docs/performance.md).
#
#   benches/load/instructions.sh [REQUESTS]     (default 2000)
#   PROFILE=DIR benches/load/instructions.sh N  (instead: callgrind profiles of both programs,
#                                                and the request path alone per request,
#                                                N requests after a warm-up, written to DIR)
#   BODY=64k benches/load/instructions.sh N     (the 64 KiB body instead of the 1 KiB one)
#   LOG=info benches/load/instructions.sh N     (RUST_LOG of both programs; default error)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/benches/load"
. "$here/lib.sh"
n=${1:-2000}
for tool in valgrind strace curl jq openssl python3; do
  command -v "$tool" >/dev/null || { echo "instructions: $tool is missing"; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -z "${KEEP:-}" ] || cp "$work"/cg.* "$work"/st.* "$KEEP"/ 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
release="${CARGO_TARGET_DIR:-$root/target}/release"
UP=$(free_port); PT=$(free_port); PC=$(free_port)
(cd "$root" && cargo build --release --locked --bin paycred --example passthrough --example upstream 2>&1 | tail -1)
bin="$release/paycred"
"$release/examples/upstream" "127.0.0.1:$UP" & pids+=($!)

. "$here/setup-paycred.sh"
echo "requests: $n (body ${BODY:-1k} with 4 templates; the pass-through forwards the same bytes)"
python3 "$here/instructions.py" --work "$work" --requests "$n" --paycred "$bin" --config "$work/paycred.yaml" \
  --paycred-port "$PC" --passthrough "$release/examples/passthrough" --passthrough-port "$PT" \
  --upstream-port "$UP" --key "$work/key.pem" --bodies "$here/bodies.py" --body "${BODY:-1k}" ${PROFILE:+--profile yes}
# (An `if`: a trailing `[ ... ] &&` would make the script exit 1 without PROFILE.)
if [ -n "${PROFILE:-}" ]; then
  mkdir -p "$PROFILE" && cp "$work"/callgrind.* "$PROFILE/" && echo "profiles: $PROFILE/callgrind.{paycred,pt}"
fi
