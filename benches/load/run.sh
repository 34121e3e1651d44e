#!/usr/bin/env bash
# paycred load bench: paycred's substitution proxy against two pass-through baselines
# measured in the same run (a minimal pingora 0.9.1 proxy, benches/load/bin/passthrough.rs,
# and nginx proxy_pass with an upstream keepalive pool), all in front of one fast upstream
# (benches/load/bin/upstream.rs).
#
# The measured proxy runs alone on CPU 0 (one worker thread); wrk and the upstream share
# CPU 1. Runs alternate paycred / pingora / nginx so drift hits all equally, and the ratio
# to pingora is taken per pair. Everything is on 127.0.0.1 and is stopped on exit.
#
# With --postgres the same run measures paycred on PostgreSQL against paycred on sled too
# (a throwaway cluster on this machine; rows "backend …", ratio to sled per pair): the proxy
# with its caches warm and off (`cache_ttl: 0s`), the REST routes, and 1, 2 and 3 instances
# on the one database.
#
#   benches/load/run.sh            full run (under 8 minutes once built)
#   benches/load/run.sh --smoke    one short repetition of each case (< 60 s); fails only on errors
#   benches/load/run.sh [--smoke] --postgres    both backends (about 2 minutes more)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/benches/load"
. "$here/lib.sh"
smoke=0; postgres=0
for arg in "$@"; do
  case $arg in
    --smoke) smoke=1 ;;
    --postgres) postgres=1 ;;
    *) echo "usage: $0 [--smoke] [--postgres]"; exit 2 ;;
  esac
done
# The full run stays under 10 minutes once built: 162 s of JSON proxy cases, 36 s of counted
# ones, 144 s of form and XML ones, 108 s of the response guard's, 24 s at a low rate, 9 s of
# REST and memory, at most 10 s waiting for a quiet machine, and the setup.
if [ $smoke = 1 ]; then reps=1; secs=1; low_secs=1; else reps=6; secs=3; low_secs=2; fi

for tool in wrk nginx taskset curl jq openssl python3; do
  command -v "$tool" >/dev/null || { echo "load bench: $tool is missing (scripts/setup-bench installs it)"; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in nginx-px; do [ -f "$work/$d/nginx.pid" ] && kill "$(cat "$work/$d/nginx.pid")" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${pgdir:-}" ] && stop_postgres "$pgdir"
  rm -rf "$work"
}
trap cleanup EXIT

UP=$(free_port); NGX=$(free_port); PT=$(free_port); PC=$(free_port)
build_bench

# The target: benches/load/bin/upstream.rs on CPU 1 beside wrk; it reads every body to its end.
taskset -c 1 "$(bench_program upstream)" "127.0.0.1:$UP" &
pids+=($!)
# The nginx baseline on CPU 0, like the other proxies.
mkdir -p "$work/nginx-px"
nginx_conf() { # dir, server block
  cat <<NGINX
worker_processes 1;
pid $work/$1/nginx.pid;
error_log $work/$1/error.log crit;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/$1/body; proxy_temp_path $work/$1/proxy;
  fastcgi_temp_path $work/$1/f; uwsgi_temp_path $work/$1/u; scgi_temp_path $work/$1/s;
  client_max_body_size 200m; client_body_buffer_size 1m;
  $2
}
NGINX
}
nginx_conf nginx-px "upstream target { server 127.0.0.1:$UP; keepalive 128; }
  server { listen 127.0.0.1:$NGX; location / { proxy_pass http://target; proxy_http_version 1.1;
    proxy_set_header Connection \"\"; proxy_request_buffering off; } }" >"$work/px.conf"
taskset -c 0 nginx -c "$work/px.conf" -p "$work/nginx-px" 2>/dev/null
NGX_PID=$(cat "$work/nginx-px/nginx.pid")
# nginx forks its worker: measure the worker's CPU.
sleep 0.2; NGX_WORKER=$(pgrep -P "$NGX_PID" | head -1)

# paycred: one project allowing the local upstream over http.
. "$here/setup-paycred.sh"
# And the same with the response guard off, for the guard's cost.
sed -i "/^projects:/r /dev/stdin" "$work/paycred.yaml" <<YAML
  - id: bench-off
    jwt: {keys: [{kid: k1, public_key_file: $work/pub.pem}], max_lifetime: 1h}
    pan: enabled
    proxy: {allowed_hosts: [127.0.0.1], allow_http: true, allow_private_networks: true, response_guard: 'off'}
YAML
RUST_LOG=warn taskset -c 0 "$bin" serve -c "$work/paycred.yaml" >"$work/paycred.log" 2>&1 &
pids+=($!); PC_PID=$!
RUST_LOG=error taskset -c 0 "$pt_bin" "127.0.0.1:$PT" "127.0.0.1:$UP" 1 >"$work/pt.log" 2>&1 &
pids+=($!); PT_PID=$!
wait_healthy "$PC"
export TOKEN=$("$bin" jwt --key "$work/key.pem" --kid k1 --project bench --sub bench --role private --ttl 30m)
PM=$(add_bench_card "$PC" "$TOKEN")
PI=$(add_bench_intent "$PC" "$TOKEN" "$PM")
python3 "$here/bodies.py" "$PM" "$work"
OFF_TOKEN=$("$bin" jwt --key "$work/key.pem" --kid k1 --project bench-off --sub bench --role private --ttl 30m)
OFF_PM=$(PROJECT=bench-off add_bench_card "$PC" "$OFF_TOKEN")
mkdir -p "$work/off" && python3 "$here/bodies.py" "$OFF_PM" "$work/off"

wait_for_quiet 10

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# CPU ticks of the threads that serve requests (paycred's runtime threads are named after the
# program); the rest of a process's CPU is background work: paycred's audit writer and
# flusher, sled's IO threads. Background = process total - these (threads that exit stay in
# the process total).
serving_ticks() {
  local t sum=0
  for t in /proc/"$1"/task/*; do
    [ "$(cat "$t/comm" 2>/dev/null)" = paycred ] || continue
    # A thread may exit between the two reads (tokio's blocking pool comes and goes).
    local v
    v=$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{print $12+$13}') || true
    sum=$(( sum + ${v:-0} ))
  done
  echo "$sum"
}
results="$work/results.tsv"
run() { # name target_port body_file pid_or_empty [extra wrk args...]
  local name=$1 port=$2 body=$3 pid=$4; shift 4
  local before after out serving=0
  before=$( [ -n "$pid" ] && cpu_ticks "$pid" || echo 0 )
  [ "$pid" = "$PC_PID" ] && serving=$(serving_ticks "$pid")
  out=$(BODY_FILE="$body" TARGET_URL="http://127.0.0.1:$UP/charge" \
        taskset -c 1 wrk -t1 -c64 -d"${secs}s" --latency -s "$here/post.lua" "$@" "http://127.0.0.1:$port/projects/${PROJECT:-bench}/proxy" 2>&1)
  after=$( [ -n "$pid" ] && cpu_ticks "$pid" || echo 0 )
  local background=0
  [ "$pid" = "$PC_PID" ] && background=$(( after - before - $(serving_ticks "$pid") + serving ))
  echo "$out" | python3 "$here/parse_wrk.py" "$name" "$((after - before))" "$background" >>"$results"
}

echo "== measuring ($reps alternating repetitions x ${secs}s per case)"
for case in 1k 64k 1m; do
  for rep in $(seq 1 "$reps"); do
    run "proxy-$case paycred" "$PC" "$work/body-$case.json" "$PC_PID"
    run "proxy-$case pingora" "$PT" "$work/body-$case.json" "$PT_PID"
    run "proxy-$case nginx" "$NGX" "$work/body-$case.json" "$NGX_WORKER"
  done
done
# Counted credentials: the 1 KiB JSON body with `virtual-card` templates (each request counts
# a use of the bench intent, which has no usage limit), paired with the same body's `pan` row.
sed "s/'pan'/'virtual-card'/g" "$work/body-1k.json" >"$work/body-1k-counted.json"
for rep in $(seq 1 "$reps"); do
  run "counted-1k virtual-card" "$PC" "$work/body-1k-counted.json" "$PC_PID"
  run "counted-1k pan" "$PC" "$work/body-1k.json" "$PC_PID"
done
# Form-encoded and SOAP bodies (4 templates each), paired with the pingora pass-through.
for case in form-1k form-64k xml-1k xml-64k; do
  type=application/x-www-form-urlencoded; [ "${case%-*}" = xml ] && type="text/xml; charset=utf-8"
  for rep in $(seq 1 "$reps"); do
    CONTENT_TYPE=$type run "proxy-$case paycred" "$PC" "$work/body-$case.txt" "$PC_PID"
    CONTENT_TYPE=$type run "proxy-$case pingora" "$PT" "$work/body-$case.txt" "$PT_PID"
  done
done
# The response guard's cost: the 1 KiB JSON request answered with 1 KiB and with 64 KiB
# (`X-Answer`), guard on (`mask`, the default) and off (project bench-off).
for answer in 1k 64k; do
  for rep in $(seq 1 "$reps"); do
    ANSWER=$answer run "answer-$answer paycred" "$PC" "$work/body-1k.json" "$PC_PID"
    ANSWER=$answer PROJECT=bench-off TOKEN=$OFF_TOKEN run "answer-$answer paycred-guard-off" "$PC" "$work/off/body-1k.json" "$PC_PID"
    ANSWER=$answer run "answer-$answer pingora" "$PT" "$work/body-1k.json" "$PT_PID"
  done
done
# Latency without queueing: one connection, closed loop.
for rep in $(seq 1 "$reps"); do
  BODY_FILE="$work/body-1k.json" TARGET_URL="http://127.0.0.1:$UP/charge" taskset -c 1 wrk -t1 -c1 -d"${low_secs}s" --latency \
    -s "$here/post.lua" "http://127.0.0.1:$PC/projects/bench/proxy" 2>&1 | python3 "$here/parse_wrk.py" "lowrate-1k paycred" 0 >>"$results"
  BODY_FILE="$work/body-1k.json" TARGET_URL="http://127.0.0.1:$UP/charge" taskset -c 1 wrk -t1 -c1 -d"${low_secs}s" --latency \
    -s "$here/post.lua" "http://127.0.0.1:$PT/projects/bench/proxy" 2>&1 | python3 "$here/parse_wrk.py" "lowrate-1k pingora" 0 >>"$results"
done
# REST routes with auth.
# (The CPU is read after wrk ends: arguments in a pipeline are expanded as it starts.)
rest() { # name script url [pid, default paycred's]
  local before out pid=${4:-$PC_PID}
  before=$(cpu_ticks "$pid")
  out=$(taskset -c 1 wrk -t1 -c64 -d"${secs}s" --latency -s "$here/$2" "$3" 2>&1)
  echo "$out" | python3 "$here/parse_wrk.py" "$1" "$(( $(cpu_ticks "$pid") - before ))" >>"$results"
}
rest "rest GET purchase intent" get.lua "http://127.0.0.1:$PC/projects/bench/purchase-intents/$PI"
rest "rest POST payment method (durable)" create_pm.lua "http://127.0.0.1:$PC"
if [ $postgres = 1 ]; then
  # paycred on PostgreSQL beside the sled one: the same config but the store, the same CPU.
  # PostgreSQL runs unpinned (it needs a core too: on 2 cores it takes CPU 1 from wrk).
  pgdir=$(mktemp -d)
  PGURL=$(start_postgres "$pgdir") || exit 1
  pg_serve() { # port cache_ttl [cpus]: a paycred on the database; sets $served to its pid
    sed -e "s|^listen: .*|listen: 127.0.0.1:$1|" -e "s|^data_dir: .*|data_dir: $work/data-$1|" \
      "$work/paycred.yaml" >"$work/paycred-$1.yaml"
    echo "store: {kind: postgres, url: \"$PGURL\", pool_size: 16, cache_ttl: $2}" >>"$work/paycred-$1.yaml"
    RUST_LOG=warn taskset -c "${3:-0}" "$bin" serve -c "$work/paycred-$1.yaml" >>"$work/paycred-pg.log" 2>&1 &
    served=$!; pids+=($served)
    wait_healthy "$1"
  }
  PG1=$(free_port); pg_serve "$PG1" 5s; PG1_PID=$served
  PGC=$(free_port); pg_serve "$PGC" 0s; PGC_PID=$served
  PMG=$(add_bench_card "$PG1" "$TOKEN")
  PIG=$(add_bench_intent "$PG1" "$TOKEN" "$PMG")
  mkdir -p "$work/pg"; python3 "$here/bodies.py" "$PMG" "$work/pg"
  # The GET rows before the proxy cases: a GET waits for its reveal's audit entry, which on
  # PostgreSQL would queue behind the entries of the proxy requests measured just before.
  rest "backend GET purchase intent sled" get.lua "http://127.0.0.1:$PC/projects/bench/purchase-intents/$PI"
  rest "backend GET purchase intent postgres" get.lua "http://127.0.0.1:$PG1/projects/bench/purchase-intents/$PIG" "$PG1_PID"
  for rep in $(seq 1 "$reps"); do
    run "backend proxy-1k sled" "$PC" "$work/body-1k.json" "$PC_PID"
    run "backend proxy-1k postgres" "$PG1" "$work/pg/body-1k.json" "$PG1_PID"
    run "backend proxy-1k postgres-cold" "$PGC" "$work/pg/body-1k.json" "$PGC_PID"
  done
  sed "s/'pan'/'virtual-card'/g" "$work/pg/body-1k.json" >"$work/pg/body-1k-counted.json"
  for rep in $(seq 1 "$reps"); do
    run "counted-1k-postgres virtual-card" "$PG1" "$work/pg/body-1k-counted.json" "$PG1_PID"
    run "counted-1k-postgres pan" "$PG1" "$work/pg/body-1k.json" "$PG1_PID"
  done
  rest "backend POST payment method sled" create_pm.lua "http://127.0.0.1:$PC"
  rest "backend POST payment method postgres" create_pm.lua "http://127.0.0.1:$PG1" "$PG1_PID"
  kill "$PGC_PID"
  # Instances x throughput: 1, 2, 3 paycreds (one thread each, unpinned) on the database,
  # each loaded by its own wrk (64 connections in all); the row is their sum.
  kill "$PG1_PID"; wait "$PG1_PID" 2>/dev/null || true
  ports=()
  for n in 1 2 3; do
    port=$(free_port); pg_serve "$port" 5s 0,1; ports+=("$port")
    for rep in $(seq 1 "$reps"); do
      loads=()
      for p in "${ports[@]}"; do
        BODY_FILE="$work/pg/body-1k.json" TARGET_URL="http://127.0.0.1:$UP/charge" \
          wrk -t1 -c$((64 / n)) -d"${secs}s" --latency -s "$here/post.lua" \
          "http://127.0.0.1:$p/projects/bench/proxy" >"$work/wrk-$p.txt" 2>&1 &
        loads+=($!)
      done
      wait "${loads[@]}"
      for p in "${ports[@]}"; do python3 "$here/parse_wrk.py" x 0 <"$work/wrk-$p.txt"; done |
        awk -F'\t' -v name="instances $n postgres" 'BEGIN{OFS="\t"} {r+=$2; q+=$5; e+=$6; if (NR==1) {p50=$3; p99=$4}}
          END{print name, r, p50, p99, q, e, 0, 0}' >>"$results"
    done
  done
fi
flushes=$(curl -s -H "Authorization: Bearer $(cat "$work/metrics.token")" "127.0.0.1:$PC/metrics" | awk '/^paycred_store_flushes_total/{f=$2} /^paycred_store_durable_writes_total/{w=$2} END{printf "%d flushes for %d durable writes", f, w}')

# Memory, on a fresh paycred (nothing cached yet): one 100 MiB body with 100 templates
# streaming through, then 200 concurrent 64 KiB requests.
kill "$PC_PID"; wait "$PC_PID" 2>/dev/null || true
RUST_LOG=warn taskset -c 0 "$bin" serve -c "$work/paycred.yaml" >>"$work/paycred.log" 2>&1 &
pids+=($!); PC_PID=$!
wait_healthy "$PC"
# (The restart destroyed the in-memory CVC keys: add the card again under a new payment method.)
curl -sf -X DELETE "127.0.0.1:$PC/projects/bench/payment-methods/$PM" -H "Authorization: Bearer $TOKEN"
PM=$(add_bench_card "$PC" "$TOKEN")
python3 "$here/bodies.py" "$PM" "$work"
rss() { awk '/VmHWM/{print $2}' "/proc/$PC_PID/status"; }
rss0=$(rss)
if [ $smoke = 0 ]; then
  curl -sf -o /dev/null -X POST "127.0.0.1:$PC/projects/bench/proxy" -H "Authorization: Bearer $TOKEN" \
    -H "Svc-Target-URL: http://127.0.0.1:$UP/big" -H 'Content-Type: application/json' --data-binary @"$work/body-100m.json"
fi
rss1=$(rss)
BODY_FILE="$work/body-64k.json" TARGET_URL="http://127.0.0.1:$UP/charge" taskset -c 1 wrk -t1 -c200 -d"${secs}s" --latency \
  -s "$here/post.lua" "http://127.0.0.1:$PC/projects/bench/proxy" 2>&1 | python3 "$here/parse_wrk.py" "memory 200x64k paycred" 0 >>"$results"
rss2=$(rss)

python3 "$here/report.py" "$results" "$flushes" "$rss0" "$rss1" "$rss2" "$smoke"
echo "bench time once built: $((SECONDS - built_at)) s"
