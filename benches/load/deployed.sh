#!/usr/bin/env bash
# paycred load bench as paycred is deployed: targets over HTTPS with a private CA (the
# project's `proxy.ca_file`), callers over TLS with HTTP/1.1 (wrk) and HTTP/2 (h2load, 16
# connections x 8 streams), TLS handshakes per second on new connections, full and resumed,
# requests that each need a new TLS connection to the target,
# and latencies at a fixed rate (oha, corrected for coordinated omission). Against the same
# two pass-through baselines as run.sh, each speaking TLS the same way: the pingora
# pass-through (benches/load/bin/passthrough.rs with --tls and --upstream-tls) and nginx
# (`listen … ssl http2`, `proxy_pass https://…` verifying the target, sessions reused,
# keepalive pool). The target is benches/load/bin/upstream.rs (with --tls for HTTPS).
#
# Same discipline as run.sh: the measured proxy alone on CPU 0 with one worker thread, the
# load tools and the target on CPU 1; repetitions alternate paycred / pingora / nginx and
# the ratios are medians of per-repetition ratios. Everything is on 127.0.0.1 and is
# stopped on exit. Certificates (RSA 2048, a CA of the bench's own) are made by openssl.
#
#   benches/load/deployed.sh           full run (under 10 minutes once built)
#   benches/load/deployed.sh --smoke   one short repetition of each case; fails only on errors
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/benches/load"
. "$here/lib.sh"
smoke_option "$@"
# Full run: 9 throughput cases and 4 new-connection cases x 4 repetitions x 3 proxies x 2 s
# (3 s for HTTP/2), 18 fixed-rate cases x 3 proxies x 3 s (1 s of it warm-up), and the
# setup: about 9.5 minutes.
if [ $smoke = 1 ]; then reps=1; secs=1; else reps=4; secs=2; fi

for tool in wrk h2load oha nginx taskset curl jq openssl python3; do
  command -v "$tool" >/dev/null || { echo "deployed bench: $tool is missing (scripts/setup-bench installs it)"; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx/nginx.pid" ] && kill "$(cat "$work/nginx/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

UP=$(free_port); UPS=$(free_port); NGX=$(free_port); NGXS=$(free_port)
PT=$(free_port); PTS=$(free_port); PC=$(free_port); PCS=$(free_port)
build_bench

# The private CA and one certificate for localhost / 127.0.0.1, served by the target and by
# the three listeners alike.
tls="$work/tls"; bench_certs "$tls"

# The targets on CPU 1 beside the load: plain and HTTPS.
taskset -c 1 "$(bench_program upstream)" "127.0.0.1:$UP" &
pids+=($!)
taskset -c 1 "$(bench_program upstream)" "127.0.0.1:$UPS" --tls "$tls/srv.pem" "$tls/srv.key" &
pids+=($!)

# nginx: one worker on CPU 0, a plain listener and a TLS one (h2 by ALPN). Connections are
# kept as long as the other proxies keep them (nginx closes one after 1000 requests by
# default, which would add handshakes only to its side).
mkdir -p "$work/nginx"
cat >"$work/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log crit;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body; proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/f; uwsgi_temp_path $work/nginx/u; scgi_temp_path $work/nginx/s;
  client_max_body_size 200m; client_body_buffer_size 1m; keepalive_requests 1000000;
  proxy_http_version 1.1; proxy_set_header Connection ""; proxy_request_buffering off;
  upstream target { server 127.0.0.1:$UP; keepalive 128; keepalive_requests 1000000; }
  upstream target_tls { server 127.0.0.1:$UPS; keepalive 128; keepalive_requests 1000000; }
  server { listen 127.0.0.1:$NGX; location / { proxy_pass http://target; } }
  server {
    listen 127.0.0.1:$NGXS ssl http2;
    ssl_certificate $tls/srv.pem; ssl_certificate_key $tls/srv.key; ssl_protocols TLSv1.2 TLSv1.3;
    location = /health { return 200; }
    location / {
      proxy_pass https://target_tls;
      proxy_ssl_name localhost; proxy_ssl_server_name on;
      proxy_ssl_trusted_certificate $tls/ca.pem; proxy_ssl_verify on; proxy_ssl_session_reuse on;
    }
  }
}
NGINX
taskset -c 0 nginx -c "$work/nginx.conf" -p "$work/nginx" 2>/dev/null
# nginx forks its worker: measure the worker's CPU.
sleep 0.2; NGX_WORKER=$(pgrep -P "$(cat "$work/nginx/nginx.pid")" | head -1)

# paycred plain (run.sh's config), and paycred over TLS: the `tls:` listener, and the project
# reaching its target over HTTPS verified against `proxy.ca_file`.
. "$here/setup-paycred.sh"
sed -e "s|^listen: .*|listen: 127.0.0.1:$PCS\ntls: {cert_file: $tls/srv.pem, key_file: $tls/srv.key}|" \
  -e "s|^data_dir: .*|data_dir: $work/data-tls|" \
  -e "s|proxy: {.*}|proxy: {allowed_hosts: [localhost], allow_private_networks: true, ca_file: $tls/ca.pem}|" \
  "$work/paycred.yaml" >"$work/paycred-tls.yaml"
RUST_LOG=warn taskset -c 0 "$bin" serve -c "$work/paycred.yaml" >"$work/paycred.log" 2>&1 &
pids+=($!); PC_PID=$!
RUST_LOG=warn taskset -c 0 "$bin" serve -c "$work/paycred-tls.yaml" >"$work/paycred-tls.log" 2>&1 &
pids+=($!); PCS_PID=$!
RUST_LOG=error taskset -c 0 "$pt_bin" "127.0.0.1:$PT" "127.0.0.1:$UP" 1 >"$work/pt.log" 2>&1 &
pids+=($!); PT_PID=$!
RUST_LOG=error taskset -c 0 "$pt_bin" "127.0.0.1:$PTS" "127.0.0.1:$UPS" 1 --tls "$tls/srv.pem" "$tls/srv.key" \
  --upstream-tls localhost "$tls/ca.pem" >"$work/pts.log" 2>&1 &
pids+=($!); PTS_PID=$!
# lib.sh's helpers name the server `127.0.0.1:PORT`; bench_certs's curl config makes that https
# (the certificate checked against the bench's CA) for the TLS paycred.
wait_healthy "$PC"
CURL_HOME="$tls/curl" wait_healthy "$PCS"
export TOKEN=$("$bin" jwt --key "$work/key.pem" --kid k1 --project bench --sub bench --role private --ttl 30m)
python3 "$here/bodies.py" "$(add_bench_card "$PC" "$TOKEN")" "$work"
mkdir -p "$work/tls-bodies"
python3 "$here/bodies.py" "$(CURL_HOME="$tls/curl" add_bench_card "$PCS" "$TOKEN")" "$work/tls-bodies"
rm -f "$work"/body-100m.json "$work"/tls-bodies/body-100m.json

wait_for_quiet 10

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
results="$work/results.tsv"
# A case's three listeners, "NAME PORT PID" each, in the order measured.
plain="paycred $PC $PC_PID pingora $PT $PT_PID nginx $NGX $NGX_WORKER"
secure="paycred $PCS $PCS_PID pingora $PTS $PTS_PID nginx $NGXS $NGX_WORKER"
# measure CASE LISTENERS PARSE LOAD [ARGS...]: $reps times, LOAD ARGS against paycred, pingora
# and nginx in turn ($port set to the listener's); `PARSE "CASE PROXY" CPU_TICKS` reads its
# output and writes the row. A load tool that fails is an error row.
measure() {
  local case=$1 parse=$3 rep i before out
  local -a l
  read -r -a l <<<"$2"
  shift 3
  for rep in $(seq 1 "$reps"); do
    for i in 0 3 6; do
      port=${l[i + 1]}
      before=$(cpu_ticks "${l[i + 2]}")
      if out=$("$@" 2>&1); then
        $parse "$case ${l[i]}" "$(( $(cpu_ticks "${l[i + 2]}") - before ))" <<<"$out" >>"$results"
      else
        echo "$case ${l[i]}: $out" >&2
        printf '%s\t0\tnan\tnan\t0\t1\t0\t0\n' "$case ${l[i]}" >>"$results"
      fi
    done
  done
}
by_wrk() { python3 "$here/parse_wrk.py" "$1" "$2"; }
by_h2load() { python3 "$here/deployed.py" h2load "$1" "$2"; }
by_stime() { python3 "$here/deployed.py" stime "$1" "$2"; }
by_oha() { python3 "$here/deployed.py" oha "$1" "$2" 1; }
# The load tools; $port is the listener, $BODY_FILE and $TARGET_URL the request's.
path=/projects/bench/proxy
wrk_load() { # SCHEME [wrk args...]
  taskset -c 1 wrk -t1 -c64 -d"${secs}s" --latency -s "$here/post.lua" "${@:2}" "$1://127.0.0.1:$port$path"
}
h2_load() { # 3 s at least: 128 streams of 1 MiB each take about a second (flow control)
  taskset -c 1 h2load -t1 -c16 -m8 -D "$(( secs > 3 ? secs : 3 ))" -d "$BODY_FILE" -H 'content-type: application/json' \
    -H "authorization: Bearer $TOKEN" -H "svc-target-url: $TARGET_URL" "https://127.0.0.1:$port$path"
}
oha_load() { # SCHEME RATE [oha args...]: RATE requests a second, each timed from when it was
  # due, for 1 s of warm-up (left out of the percentiles) and $secs more.
  taskset -c 1 oha --no-tui --output-format csv --worker-threads 1 -z "$((secs + 1))s" -q "$2" --latency-correction --insecure \
    -m POST -D "$BODY_FILE" -H 'content-type: application/json' -H "authorization: Bearer $TOKEN" \
    -H "svc-target-url: $TARGET_URL" "${@:3}" "$1://127.0.0.1:$port$path"
}
# Handshakes alone, each request a new TLS connection with GET /health (answered by each
# proxy itself): full handshakes by wrk (16 connections at a time); resumed ones by 8
# `openssl s_time -reuse` loops at once on CPU 1 (wrk does not resume). s_time's own totals
# are whole seconds: the wall time is measured here.
wrk_new() { taskset -c 1 wrk -t1 -c16 -d"${secs}s" -H "Connection: close" "https://127.0.0.1:$port/health"; }
stime_load() {
  local i start
  start=$(date +%s%N)
  for i in 1 2 3 4 5 6 7 8; do
    taskset -c 1 openssl s_time -connect "127.0.0.1:$port" "$1" -time "$secs" -www /health &
  done
  wait
  echo "seconds $(( $(date +%s%N) - start ))e-9"
}

echo "== measuring ($reps alternating repetitions x ${secs}s per case)"
plain_body() { BODY_FILE="$work/body-$1.json" TARGET_URL="http://127.0.0.1:$UP/charge"; }
tls_body() { BODY_FILE="$work/tls-bodies/body-$1.json" TARGET_URL="https://localhost:$UPS/charge"; }
export BODY_FILE TARGET_URL TOKEN
for size in 1k 64k 1m; do
  plain_body $size; measure "plain-h1-$size" "$plain" by_wrk wrk_load http
  tls_body $size; measure "tls-h1-$size" "$secure" by_wrk wrk_load https
  measure "tls-h2-$size" "$secure" by_h2load h2_load
done
# New connections: a caller opening a TLS connection per request (a full handshake, then
# the 1 KiB proxy request), and handshakes alone, full and resumed.
tls_body 1k; measure "tls-h1-newconn-1k" "$secure" by_wrk wrk_load https -c16 -H "Connection: close"
# New connections to the target: it closes each one after its answer, so every request opens
# a TLS connection to it (paycred and nginx resume the session the target gave; the pingora
# pass-through makes a full handshake each time).
export CLOSE_TARGET=1
tls_body 1k; measure "tls-h1-newtarget-1k" "$secure" by_wrk wrk_load https
unset CLOSE_TARGET
measure "handshake-full" "$secure" by_wrk wrk_new
measure "handshake-resumed" "$secure" by_stime stime_load -reuse
# Latency at a fixed rate, 50 % and 90 % of paycred's median maximum in the case above: one
# repetition each, the same rate for all three.
for size in 1k 64k 1m; do
  for case in plain-h1 tls-h1 tls-h2; do
    max=$(python3 "$here/deployed.py" max "$results" "$case-$size")
    if [ $case = plain-h1 ]; then plain_body $size; listeners=$plain; else tls_body $size; listeners=$secure; fi
    scheme=https; [ $case = plain-h1 ] && scheme=http
    for pct in 50 90; do
      rate=$(( max * pct / 100 )); [ "$rate" -gt 0 ] || rate=1
      if [ $case = tls-h2 ]; then extra=(--http2 -c 16 -p 8); else extra=(-c 32); fi
      reps=1 measure "$case-$size @$pct% = $rate" "$listeners" by_oha oha_load "$scheme" "$rate" "${extra[@]}"
    done
  done
done

# The TLS version and cipher each listener negotiated with an OpenSSL client.
for l in "paycred $PCS" "pingora $PTS" "nginx $NGXS"; do
  set -- $l
  { openssl s_client -connect "127.0.0.1:$2" -alpn h2,http/1.1 </dev/null 2>/dev/null || true; } |
    awk -v who="$1" '/^New, /{v=$2; c=$NF} /^ALPN protocol/{a=$NF} /^Server Temp Key/{k=$4; sub(",", "", k)}
      END{print who ": " v " " c ", key exchange " k ", ALPN " a}'
done
python3 "$here/deployed.py" report "$results"
echo "bench time once built: $((SECONDS - built_at)) s"
