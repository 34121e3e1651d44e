#!/usr/bin/env bash
# Deterministic cost per request: user-space instructions (valgrind callgrind, counting
# switched on after a warm-up and dumped before the shutdown) and syscalls (strace -c) of
# paycred's substitution proxy and of the pingora pass-through, each for the same fixed
# number of 1 KiB POSTs (4 templates) over one keep-alive connection. The request path's
# count (every task the runtime ran) does not depend on what else the machine is doing; the
# total does a little, through how many requests share an audit batch
# (docs/performance.md).
#
#   benches/load/instructions.sh [REQUESTS]     (default 2000)
#   PROFILE=DIR benches/load/instructions.sh N  (also keep both programs' callgrind
#                                                profiles of the window in DIR)
#   BODY=64k benches/load/instructions.sh N     (the 64 KiB body instead of the 1 KiB one;
#                                                BODY=1m the 1 MiB one, streamed)
#   LOG=info benches/load/instructions.sh N     (RUST_LOG of both programs; default error)
#   KEEP=DIR benches/load/instructions.sh N     (keep the profiles and strace counts in DIR)
#   CACHEGRIND=1 benches/load/instructions.sh N (also the difference of two whole cachegrind
#                                                runs, which start-up noise moves; the window
#                                                is the figure to use)
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
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -z "${KEEP:-}" ] || { cp "$work"/callgrind.* "$work"/st.* "$work"/cg.* "$KEEP"/ 2>/dev/null || true; }; rm -rf "$work"; }
trap cleanup EXIT
release="${CARGO_TARGET_DIR:-$root/target}/release"
UP=$(free_port); PT=$(free_port); PC=$(free_port)
(cd "$root" && cargo build --release --locked --bin paycred --example passthrough --example upstream 2>&1 | tail -1)
bin="$release/paycred"
"$(bench_program upstream)" "127.0.0.1:$UP" & pids+=($!)

. "$here/setup-paycred.sh"
echo "requests: $n (body ${BODY:-1k} with 4 templates; the pass-through forwards the same bytes)"
python3 "$here/instructions.py" --work "$work" --requests "$n" --paycred "$bin" --config "$work/paycred.yaml" \
  --paycred-port "$PC" --passthrough "$(bench_program passthrough)" --passthrough-port "$PT" \
  --upstream-port "$UP" --key "$work/key.pem" --bodies "$here/bodies.py" --body "${BODY:-1k}" $([ "${CACHEGRIND:-}" = 1 ] && echo --cachegrind)
# (An `if`: a trailing `[ ... ] &&` would make the script exit 1 without PROFILE.)
if [ -n "${PROFILE:-}" ]; then
  mkdir -p "$PROFILE" && cp "$work"/callgrind.* "$PROFILE/" && echo "profiles: $PROFILE/callgrind.{paycred,pt}"
fi
