#!/usr/bin/env bash
# paycred's browser proxy under load (docs/browser-checkout.md), against paycred's own TLS
# listener and against mitmproxy doing the same swap, in one run. Each case posts the same
# 1 KiB form (benches/load/bodies.py --card) to an HTTPS target (benches/load/bin/upstream.rs
# --tls, a private CA of the bench's own) over keep-alive connections, 64 at a time (oha):
#
#   browser-1k     through the browser proxy: CONNECT with a browser session's Basic
#                  credentials, TLS to a leaf minted by paycred's interception CA, the form's
#                  stand-in number and CVC swapped for the real ones (a use of the intent each)
#   reverse-1k     to paycred's TLS listener (`/projects/bench/proxy`), the form's card fields
#                  `pan` templates, substituted
#   reverse-use-1k the same with `virtual-card` templates: a use of an intent counted each, as
#                  the browser proxy counts one (to a second target, which checks nothing: the
#                  virtual card's values are not the stored card's)
#   mitmproxy-1k   through mitmdump (PyPI, pinned by scripts/setup-bench) with
#                  benches/load/mitm_swap.py swapping the same stand-ins, the target verified
#                  against the bench's CA
#
# and new connections, 16 at a time, each carrying one request: through the browser proxy
# (TCP, CONNECT, a handshake with the cached leaf; the form without stand-ins, so no use is
# counted, to the second target) and to the TLS listener (TCP, a handshake; reverse-1k's
# request).
# The target checks every body: one without the real number and CVC is answered 422, an
# error. The proxies run alone on CPU 0 (paycred with one worker thread), oha and the target
# on CPU 1; repetitions alternate the cases and the ratios are medians of per-repetition ones.
#
#   benches/load/browser.sh           full run (3 repetitions x 5 s a case: about 2 minutes)
#   benches/load/browser.sh --smoke   one 3 s repetition of each case (< 60 s); fails only on errors
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/benches/load"
. "$here/lib.sh"
smoke_option "$@"
# (mitmproxy's first 64 handshakes take about a second.)
if [ $smoke = 1 ]; then reps=1; secs=3; else reps=3; secs=5; fi
mitmdump="${CARGO_TARGET_DIR:-$root/target}/mitmproxy-venv/bin/mitmdump"

for tool in oha taskset curl jq openssl python3 "$mitmdump"; do
  command -v "$tool" >/dev/null || { echo "browser bench: $tool is missing (scripts/setup-bench installs it)"; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

UPS=$(free_port); UPV=$(free_port); PC=$(free_port); BP=$(free_port); MP=$(free_port)
build_bench

# The bench's CA and the targets' certificate (localhost, 127.0.0.1); paycred's interception
# CA from `paycred ca`.
tls="$work/tls"; bench_certs "$tls"
"$bin" ca --out "$work/ca" >/dev/null

# The card the bench stores (lib.sh's add_bench_card), as a form-encoded body carries it.
real_number=4242424242424242 real_cvc=123
taskset -c 1 "$(bench_program upstream)" "127.0.0.1:$UPS" --tls "$tls/srv.pem" "$tls/srv.key" \
  --expect "card%5Bnumber%5D=$real_number&" --expect "card%5Bcvc%5D=$real_cvc&" &
pids+=($!)
taskset -c 1 "$(bench_program upstream)" "127.0.0.1:$UPV" --tls "$tls/srv.pem" "$tls/srv.key" &
pids+=($!)

# paycred: run.sh's config with the TLS listener (deployed.sh's), the target reached over
# HTTPS verified against the bench's CA, and the browser proxy with its checkout settings.
. "$here/setup-paycred.sh"
sed -i -e "s|^listen: .*|listen: 127.0.0.1:$PC\ntls: {cert_file: $tls/srv.pem, key_file: $tls/srv.key}|" \
  -e "s|proxy: {.*}|proxy: {allowed_hosts: [localhost], allow_private_networks: true, ca_file: $tls/ca.pem}\n    browser_checkout: {allowed_hosts: [localhost], max_ttl: 1h, resolve: {'localhost:$UPS': '127.0.0.1:$UPS', 'localhost:$UPV': '127.0.0.1:$UPV'}}|" \
  "$work/paycred.yaml"
echo "browser_proxy: {listen: 127.0.0.1:$BP, ca: {cert_file: $work/ca/ca.pem, key_file: $work/ca/ca-key.pem}}" >>"$work/paycred.yaml"
RUST_LOG=warn taskset -c 0 "$bin" serve -c "$work/paycred.yaml" >"$work/paycred.log" 2>&1 &
pids+=($!); PC_PID=$!
# lib.sh's helpers name the server `127.0.0.1:PORT`: bench_certs's curl config makes that https.
export CURL_HOME="$tls/curl"
wait_healthy "$PC"
TOKEN=$("$bin" jwt --key "$work/key.pem" --kid k1 --project bench --sub bench --role private --ttl 30m)
PM=$(add_bench_card "$PC" "$TOKEN")
# A `pan` intent, whose real values are the stored card's, and a `virtual-card` one for
# reverse-use-1k. Every swapping request counts a use: a limit the bench does not reach.
limit='{"type":"usageLimit","value":"1000000","details":{"count":1000000}}'
PI=$(CREDENTIAL=pan add_bench_intent "$PC" "$TOKEN" "$PM" "$limit")
add_bench_intent "$PC" "$TOKEN" "$PM" "$limit" >/dev/null
session=$(curl -sf -X POST "127.0.0.1:$PC/projects/bench/purchase-intents/$PI/browser-sessions" \
  -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"allowedHosts":["localhost"]}') ||
  { echo "browser bench: no browser session"; tail -n 5 "$work/paycred.log"; exit 1; }
unset CURL_HOME
browser_auth=$(jq -r '.proxy.username + ":" + .proxy.password' <<<"$session")
python3 "$here/bodies.py" --card "$PM" $(jq -r '.card | .number, .expirationMonth, .expirationYear, .cvc' <<<"$session") "$work"
sed 's/%27pan%27/%27virtual-card%27/g' "$work/body-card-1k-templates.txt" >"$work/body-card-1k-intent.txt"
sed "s/=$(jq -r .card.number <<<"$session")&/=none\&/" "$work/body-card-1k.txt" >"$work/body-card-1k-none.txt"

# mitmproxy on CPU 0, its own CA in its confdir, the same Basic credentials asked.
mitm_auth="bench:$(openssl rand -hex 16)"
taskset -c 0 "$mitmdump" -q --listen-host 127.0.0.1 -p "$MP" --set confdir="$work/mitm" \
  --proxyauth "$mitm_auth" --set ssl_verify_upstream_trusted_ca="$tls/ca.pem" \
  -s "$here/mitm_swap.py" --set swap="$(jq -r '.card | .number + ":'$real_number':" + .cvc + ":'$real_cvc'"' <<<"$session")" \
  >"$work/mitm.log" 2>&1 &
pids+=($!); MITM_PID=$!
for _ in $(seq 1 100); do [ -f "$work/mitm/mitmproxy-ca-cert.pem" ] && curl -s -o /dev/null "127.0.0.1:$MP" && break; sleep 0.1; done

# The loads: $1 the row, $2 the measured process, the rest oha's; over TLS to the target at
# localhost (through a proxy) or to the TLS listener.
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
results="$work/results.tsv"
load() {
  local name=$1 pid=$2 before out
  shift 2
  before=$(cpu_ticks "$pid")
  if out=$(taskset -c 1 oha --no-tui --output-format json --worker-threads 1 -z "${secs}s" -m POST \
    -T application/x-www-form-urlencoded "$@" 2>&1); then
    python3 "$here/browser.py" oha "$name" "$(( $(cpu_ticks "$pid") - before ))" <<<"$out" >>"$results"
  else
    echo "$name: $out" >&2
    printf '%s\t0\tnan\tnan\t0\t1\t0\t0\n' "$name" >>"$results"
  fi
}
target="https://localhost:$UPS/charge"
basic() { echo "Proxy-Authorization: Basic $(printf %s "$1" | base64 -w0)"; }
browser() { load "$1" "$PC_PID" -D "$work/body-card-1k${body:+-$body}.txt" -x "http://127.0.0.1:$BP" \
  --proxy-header "$(basic "$browser_auth")" --cacert "$work/ca/ca.pem" "${@:2}" "${to:-$target}"; }
reverse() { load "$1" "$PC_PID" -D "$work/body-card-1k-${body:-templates}.txt" -H "Authorization: Bearer $TOKEN" \
  -H "Svc-Target-URL: ${to:-$target}" --cacert "$tls/ca.pem" "${@:2}" "https://127.0.0.1:$PC/projects/bench/proxy"; }
mitm() { load "$1" "$MITM_PID" -D "$work/body-card-1k.txt" -x "http://127.0.0.1:$MP" \
  --proxy-header "$(basic "$mitm_auth")" --cacert "$work/mitm/mitmproxy-ca-cert.pem" "${@:2}" "$target"; }

# Once each by curl first: the target refuses the stand-ins, and receives the real values
# through each proxy.
check() { # what, curl args
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --data-binary @"$work/body-card-1k.txt" "${@:2}" "$target")
  [ "$code" = "${expect:-200}" ] || { echo "browser bench: $1 answered $code, not ${expect:-200}"; tail -n 5 "$work/paycred.log" "$work/mitm.log"; exit 1; }
}
expect=422 check "the target, stand-ins sent directly" --cacert "$tls/ca.pem"
check "the browser proxy" -x "http://127.0.0.1:$BP" --proxy-user "$browser_auth" --cacert "$work/ca/ca.pem"
check "mitmproxy" -x "http://127.0.0.1:$MP" --proxy-user "$mitm_auth" --cacert "$work/mitm/mitmproxy-ca-cert.pem"

[ $smoke = 1 ] || wait_for_quiet 10
echo "== measuring ($reps alternating repetitions x ${secs}s per case), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$reps"); do
  browser browser-1k -c 64
  reverse reverse-1k -c 64
  body=intent to="https://localhost:$UPV/charge" reverse reverse-use-1k -c 64
  mitm mitmproxy-1k -c 64
  body=none to="https://localhost:$UPV/charge" browser browser-newconn-1k -c 16 --disable-keepalive
  reverse reverse-newconn-1k -c 16 --disable-keepalive
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/browser.py" report "$results"
echo "bench time once built: $((SECONDS - built_at)) s"
