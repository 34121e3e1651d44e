#!/usr/bin/env bash
# Paired A/B of two paycred variants on the load bench's 1 KiB proxy request (4 templates, or
# the 64 KiB or streamed 1 MiB one with BODY=64k or BODY=1m):
# two builds, or one build under two log levels. Both run at once on CPU 0 (one worker thread
# each, their own data dirs and keys), wrk and the upstream on CPU 1; runs alternate A, B so
# drift hits both, and the ratio B/A is taken per pair. Everything is on 127.0.0.1 and is
# stopped on exit. Under 2 minutes with the defaults.
#
#   benches/load/ab.sh BIN_A BIN_B [pairs] [seconds]
#   LOG_A=warn LOG_B=info benches/load/ab.sh BIN BIN     (RUST_LOG of each; default warn)
#   CONNS=1 benches/load/ab.sh BIN_A BIN_B              (wrk's connections; default 64; 1 is the
#                                                        load bench's low-rate case, one at a time)
#   BODY=1m benches/load/ab.sh BIN_A BIN_B              (the body: 1k, the default, 64k or 1m)
#
# Each variant's stderr goes to a file, as it would to a log collector.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -ge 2 ] || { sed -n 2,14p "$0"; exit 2; }
case ${BODY:=1k} in 1k | 64k | 1m) ;; *) echo "ab: BODY is 1k, 64k or 1m"; exit 2 ;; esac
bin_a=$(realpath "$1"); bin_b=$(realpath "$2"); pairs=${3:-6}; secs=${4:-3}
root=$(cd "$here/../.." && pwd)
upstream_bin=$(bench_program upstream)
[ -x "$upstream_bin" ] || { echo "ab: $upstream_bin is missing (cargo build --release --example upstream)"; exit 1; }
for tool in wrk taskset curl jq openssl python3; do
  command -v "$tool" >/dev/null || { echo "ab: $tool is missing (scripts/setup-bench installs it)"; exit 1; }
done

top=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$top"
}
trap cleanup EXIT
UP=$(free_port)
taskset -c 1 "$upstream_bin" "127.0.0.1:$UP" &
pids+=($!)

# start VARIANT BIN LOG: a configured paycred with a payment method, its token and bodies.
start() {
  local name=$1 log=$3
  bin=$2 work="$top/$name" PC=$(free_port)
  mkdir -p "$work"
  . "$here/setup-paycred.sh"
  RUST_LOG=$log taskset -c 0 "$bin" serve -c "$work/paycred.yaml" 2>"$work/stderr.log" >/dev/null &
  pids+=($!)
  echo "$!" >"$work/pid"; echo "$PC" >"$work/port"
  wait_healthy "$PC"
  "$bin" jwt --key "$work/key.pem" --kid k1 --project bench --sub bench --role private --ttl 30m >"$work/token"
  local pm
  pm=$(add_bench_card "$PC" "$(cat "$work/token")")
  python3 "$here/bodies.py" "$pm" "$work"
}
start a "$bin_a" "${LOG_A:-warn}"
start b "$bin_b" "${LOG_B:-warn}"

wait_for_quiet

results="$top/results.tsv"
run() { # variant
  local work="$top/$1" pid before after
  pid=$(cat "$work/pid")
  before=$(awk '{print $14+$15}' "/proc/$pid/stat")
  out=$(BODY_FILE="$work/body-$BODY.json" TARGET_URL="http://127.0.0.1:$UP/charge" TOKEN=$(cat "$work/token") \
        taskset -c 1 wrk -t1 -c"${CONNS:-64}" -d"${secs}s" --latency -s "$here/post.lua" "http://127.0.0.1:$(cat "$work/port")/projects/bench/proxy" 2>&1)
  after=$(awk '{print $14+$15}' "/proc/$pid/stat")
  echo "$out" | python3 "$here/parse_wrk.py" "$1" "$((after - before))" >>"$results"
}
echo "== $pairs pairs x ${secs}s, ${CONNS:-64} connections, body $BODY: A=$bin_a (RUST_LOG=${LOG_A:-warn}), B=$bin_b (RUST_LOG=${LOG_B:-warn})"
for _ in $(seq 1 "$pairs"); do run a; run b; done
python3 - "$results" "$(getconf CLK_TCK)" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
tck = int(sys.argv[2])
by = {"a": [], "b": []}
for r in rows:
    by[r[0]].append(r)
def show(name, rs):
    rps = [float(r[1]) for r in rs]
    cpu = [int(r[6]) / tck * 1e6 / max(1, int(r[4])) for r in rs]
    errs = sum(int(r[5]) for r in rs)
    print(f"{name}: req/s median {statistics.median(rps):,.0f} (min {min(rps):,.0f}, max {max(rps):,.0f}), "
          f"p50 {statistics.median(float(r[2]) for r in rs):.3f} ms, p99 {statistics.median(float(r[3]) for r in rs):.2f} ms, CPU {statistics.median(cpu):.1f} us/req, errors {errs}")
    return rps, errs
a, ea = show("A", by["a"])
b, eb = show("B", by["b"])
ratios = sorted(y / x for x, y in zip(a, b))
print(f"B/A per pair: median {statistics.median(ratios):.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f})")
sys.exit(1 if ea or eb else 0)
PY
