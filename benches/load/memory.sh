#!/usr/bin/env bash
# Memory per idle keep-alive connection: COUNT connections (default 10,000) each send one
# proxied 1 KiB request with 4 templates (benches/load/bodies.py) and then stay open and
# idle; the server's resident memory (VmRSS) before and after gives KiB per connection.
# Measured on paycred's plain listener and on its TLS listener (a self-signed P-256
# certificate made here), with the pingora 0.9.1 pass-through (benches/load/bin/passthrough.rs)
# and nginx (plain and TLS) as baselines, all in front of benches/load/bin/upstream.rs.
# Then paycred's peak memory (VmHWM, reset first) under 1,000 concurrent HTTP/2 streams of
# 64 KiB bodies over TLS (h2load -c 10 -m 100), on a fresh instance.
#
# Every server runs one worker thread on 127.0.0.1 and is stopped on exit; the client is
# benches/load/idle_conns.py. Under 3 minutes once built.
#
#   benches/load/memory.sh             10,000 connections per case
#   benches/load/memory.sh --smoke     200 connections, 100 h2 streams; fails only on errors
#   BIN=path/to/paycred benches/load/memory.sh    another paycred build (no cargo build of it)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/benches/load"
. "$here/lib.sh"
smoke_option "$@"
if [ $smoke = 1 ]; then count=200; h2n=100; else count=10000; h2n=1000; fi
for tool in nginx h2load curl jq openssl python3; do
  command -v "$tool" >/dev/null || { echo "memory bench: $tool is missing (scripts/setup-bench installs it)"; exit 1; }
done
# Each side of a connection holds a descriptor: the client and every server need COUNT + some.
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge $((count + 200)) ] || { echo "memory bench: ulimit -n $(ulimit -n) is below $((count + 200))"; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in ngx; do [ -f "$work/$d/nginx.pid" ] && kill "$(cat "$work/$d/nginx.pid")" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

release="${CARGO_TARGET_DIR:-$root/target}/release"
echo "== building (release)"
if [ -n "${BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --example passthrough --example upstream 2>&1 | tail -1)
  bin=$(realpath "$BIN")
else
  (cd "$root" && cargo build --release --locked --bin paycred --example passthrough --example upstream 2>&1 | tail -1)
  bin="$release/paycred"
fi
started=$SECONDS

UP=$(free_port); PC=$(free_port); PCT=$(free_port); PCH=$(free_port); PT=$(free_port); NGX=$(free_port); NGXT=$(free_port)
"$(bench_program upstream)" "127.0.0.1:$UP" &
pids+=($!)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null

# paycred plain ($PC) and TLS ($PCT, h2 offered by ALPN), one worker thread each.
. "$here/setup-paycred.sh"
sed -e "s|^listen: .*|listen: 127.0.0.1:$PCT|" -e "s|^data_dir: .*|data_dir: $work/data-tls|" \
  "$work/paycred.yaml" >"$work/paycred-tls.yaml"
echo "tls: {cert_file: $work/tls.crt, key_file: $work/tls.key}" >>"$work/paycred-tls.yaml"
RUST_LOG=warn "$bin" serve -c "$work/paycred.yaml" >"$work/paycred.log" 2>&1 &
pids+=($!); PC_PID=$!
RUST_LOG=warn "$bin" serve -c "$work/paycred-tls.yaml" >"$work/paycred-tls.log" 2>&1 &
pids+=($!); PCT_PID=$!
# A fresh TLS instance for the h2 case (the memory an allocator keeps after the idle cases
# would hide the peak).
sed -e "s|^listen: .*|listen: 127.0.0.1:$PCH|" -e "s|^data_dir: .*|data_dir: $work/data-h2|" \
  "$work/paycred-tls.yaml" >"$work/paycred-h2.yaml"
RUST_LOG=warn "$bin" serve -c "$work/paycred-h2.yaml" >"$work/paycred-h2.log" 2>&1 &
pids+=($!); PCH_PID=$!
RUST_LOG=error "$(bench_program passthrough)" "127.0.0.1:$PT" "127.0.0.1:$UP" 1 >"$work/pt.log" 2>&1 &
pids+=($!); PT_PID=$!
mkdir -p "$work/ngx"
cat >"$work/ngx.conf" <<NGINX
worker_processes 1;
worker_rlimit_nofile $(ulimit -n);
pid $work/ngx/nginx.pid;
error_log $work/ngx/error.log crit;
events { worker_connections $((count + 500)); }
http {
  access_log off;
  client_body_temp_path $work/ngx/body; proxy_temp_path $work/ngx/proxy;
  fastcgi_temp_path $work/ngx/f; uwsgi_temp_path $work/ngx/u; scgi_temp_path $work/ngx/s;
  keepalive_timeout 120s;
  upstream target { server 127.0.0.1:$UP; keepalive 128; }
  server {
    listen 127.0.0.1:$NGX; listen 127.0.0.1:$NGXT ssl;
    ssl_certificate $work/tls.crt; ssl_certificate_key $work/tls.key;
    location / { proxy_pass http://target; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGINX
nginx -c "$work/ngx.conf" -p "$work/ngx" 2>/dev/null
sleep 0.2; NGX_WORKER=$(pgrep -P "$(cat "$work/ngx/nginx.pid")" | head -1)

wait_healthy "$PC"
export TOKEN=$("$bin" jwt --key "$work/key.pem" --kid k1 --project bench --sub bench --role private --ttl 30m)
PM=$(add_bench_card "$PC" "$TOKEN")
python3 "$here/bodies.py" "$PM" "$work"
# tls_card PORT DIR: the TLS instances have stores of their own: the card again, over TLS,
# and the bodies naming it in DIR.
tls_card() {
  for _ in $(seq 1 100); do curl -skf "https://127.0.0.1:$1/health" >/dev/null && break; sleep 0.1; done
  local pm
  pm=$(curl -skf -X POST "https://127.0.0.1:$1/projects/bench/payment-methods" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' \
    -d '{"entityId":"bench","card":{"number":"4242424242424242","expirationMonth":"12","expirationYear":"2034","cvc":"123"}}' | jq -r .id)
  mkdir -p "$2" && python3 "$here/bodies.py" "$pm" "$2"
}
tls_card "$PCT" "$work/tls"
tls_card "$PCH" "$work/h2"
export TARGET_URL="http://127.0.0.1:$UP/charge"

kib() { awk -v f="$2" '$1 == f":" {print $2}' "/proc/$1/status"; }
results="$work/results.txt"
failed=0
# idle NAME PORT PID BODY [--tls]: warms the server up (64 connections, closed), then holds
# $count idle connections; prints the row.
idle() {
  local name=$1 port=$2 pid=$3 body=$4 tls=${5:-} ready="$work/ready" client before after
  rm -f "$ready"
  BODY_FILE=$body python3 "$here/idle_conns.py" "$port" 64 "$ready" --close $tls
  sleep 0.5
  before=$(kib "$pid" VmRSS)
  rm -f "$ready"
  BODY_FILE=$body python3 "$here/idle_conns.py" "$port" "$count" "$ready" $tls &
  client=$!
  for _ in $(seq 1 1200); do [ -f "$ready" ] && break; kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
  sleep 1
  after=$(kib "$pid" VmRSS)
  local got; got=$(cat "$ready" 2>/dev/null || echo "ok 0 errors $count")
  kill "$client" 2>/dev/null || true; wait "$client" 2>/dev/null || true
  local held errors; held=$(echo "$got" | awk '{print $2}'); errors=$(echo "$got" | awk '{print $4}')
  [ "$errors" = 0 ] && [ "$held" = "$count" ] || failed=1
  printf '%-22s %6d idle  RSS %8d -> %8d KiB  %6.1f KiB per connection  (errors %d)\n' \
    "$name" "$held" "$before" "$after" "$(awk -v a="$after" -v b="$before" -v n="$held" 'BEGIN{print (a - b) / (n ? n : 1)}')" \
    "$errors" | tee -a "$results"
  sleep 1
}

echo "== idle keep-alive connections ($count per case; load: $(cut -d' ' -f1-3 /proc/loadavg))"
idle "plain paycred" "$PC" "$PC_PID" "$work/body-1k.json"
idle "plain pingora" "$PT" "$PT_PID" "$work/body-1k.json"
idle "plain nginx" "$NGX" "$NGX_WORKER" "$work/body-1k.json"
idle "tls paycred" "$PCT" "$PCT_PID" "$work/tls/body-1k.json" --tls
idle "tls nginx" "$NGXT" "$NGX_WORKER" "$work/tls/body-1k.json" --tls

# h2: $h2n concurrent streams of 64 KiB bodies on 10 connections: the peak over the start's.
before=$(kib "$PCH_PID" VmHWM)
out=$(h2load -c 10 -m $((h2n / 10)) -n "$h2n" -d "$work/h2/body-64k.json" \
  -H "authorization: Bearer $TOKEN" -H "svc-target-url: $TARGET_URL" -H 'content-type: application/json' \
  "https://127.0.0.1:$PCH/projects/bench/proxy" 2>&1)
after=$(kib "$PCH_PID" VmHWM)
ok=$(echo "$out" | awk '/^status codes:/{print $3}')
[ "${ok:-0}" = "$h2n" ] || { failed=1; echo "$out" | tail -8; }
printf '%-22s %6d streams  peak RSS %8d -> %8d KiB  (+%d KiB, 2xx %s)\n' "h2 64k paycred" "$h2n" "$before" "$after" \
  "$((after - before))" "${ok:-0}" | tee -a "$results"

echo "memory bench time once built: $((SECONDS - started)) s"
[ $failed = 0 ] || { echo "memory bench: errors (see above)"; tail -5 "$work"/paycred*.log; exit 1; }
