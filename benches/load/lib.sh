# Sourced by the load scripts (run.sh, ab.sh, instructions.sh): the helpers they share.
# Each defines $root, the repository, before calling them.

# bench_program NAME: the release build of benches/load/bin/NAME.rs. The programs are
# declared as cargo examples (`cargo build --release --example NAME`), so cargo puts them
# in its examples folder.
bench_program() { echo "${CARGO_TARGET_DIR:-$root/target}/release/examples/$1"; }

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_healthy PORT: waits (at most 10 s) until paycred on PORT answers /health.
wait_healthy() {
  for _ in $(seq 1 100); do curl -sf "127.0.0.1:$1/health" >/dev/null && return; sleep 0.1; done
}

# add_bench_card PORT TOKEN: stores the bench's card for entity `bench` in project `bench`
# (or $PROJECT); prints its payment method id.
add_bench_card() {
  curl -sf -X POST "127.0.0.1:$1/projects/${PROJECT:-bench}/payment-methods" -H "Authorization: Bearer $2" \
    -H 'Content-Type: application/json' \
    -d '{"entityId":"bench","card":{"number":"4242424242424242","expirationMonth":"12","expirationYear":"2034","cvc":"123"}}' | jq -r .id
}

# add_bench_intent PORT TOKEN PM [MANDATE]: a virtual-card (or $CREDENTIAL) purchase intent for
# payment method PM, with a maxAmount mandate (and MANDATE, a JSON object); prints its id.
add_bench_intent() {
  curl -sf -X POST "127.0.0.1:$1/projects/bench/purchase-intents" -H "Authorization: Bearer $2" \
    -H 'Content-Type: application/json' \
    -d '{"entityId":"bench","credentialType":"'"${CREDENTIAL:-virtual-card}"'","paymentMethodId":"'"$3"'","mandates":[{"type":"maxAmount","value":"100","details":{"currency":"USD"}}'"${4:+,$4}"']}' | jq -r .id
}

# start_postgres DIR: a throwaway PostgreSQL cluster in DIR (a new directory of its own, from
# `mktemp -d`: the postgres user must reach it) on a free port
# of 127.0.0.1, with database `bench`; prints its URL. As the `postgres` user when root
# (PostgreSQL refuses root); Debian keeps the programs in /usr/lib/postgresql/<v>/bin.
# Settings as shipped (fsync on): writes are durable as sled's are. Stop: stop_postgres DIR.
start_postgres() {
  local dir=$1 port bin as=()
  port=$(free_port)
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -x "$bin/initdb" ] || { echo "load bench: PostgreSQL is missing (scripts/setup installs it)" >&2; return 1; }
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir"; as=(runuser -u postgres --); fi
  "${as[@]}" "$bin/initdb" -A trust -U postgres --no-sync -D "$dir/data" >/dev/null || return 1
  "${as[@]}" "$bin/pg_ctl" -w -s -l "$dir/log" -D "$dir/data" \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start || return 1
  "${as[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres bench || return 1
  echo "postgres://postgres@127.0.0.1:$port/bench"
}

stop_postgres() {
  local bin as=()
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  "${as[@]}" "$bin/pg_ctl" -D "$1/data" -m fast -s stop || true
  rm -rf "$1"
}

# wait_for_quiet [SECONDS]: waits (at most SECONDS, default 20) for a quiet machine: other
# load skews every number.
wait_for_quiet() {
  for _ in $(seq 1 "${1:-20}"); do
    python3 -c "import sys; sys.exit(0 if $(cut -d' ' -f1 /proc/loadavg) < 0.7 else 1)" && return
    sleep 1
  done
}

# build_bench: the release builds the load scripts run (paycred, the pingora pass-through,
# the target); sets $bin (paycred), $pt_bin (the pass-through) and $built_at ($SECONDS once
# built, for the bench's own time).
build_bench() {
  echo "== building (release)"
  (cd "$root" && cargo build --release --locked --bin paycred --example passthrough --example upstream 2>&1 | tail -1)
  built_at=$SECONDS
  bin="${CARGO_TARGET_DIR:-$root/target}/release/paycred"
  pt_bin=$(bench_program passthrough)
}

# smoke_option ARGS...: sets $smoke to 1 for `--smoke`, else 0; any other argument prints the
# usage and exits.
smoke_option() {
  smoke=0
  for arg in "$@"; do
    case $arg in
      --smoke) smoke=1 ;;
      *) echo "usage: $0 [--smoke]"; exit 2 ;;
    esac
  done
}

# bench_certs DIR: a private CA (DIR/ca.pem) and a certificate for localhost and 127.0.0.1
# signed by it (DIR/srv.pem, DIR/srv.key), RSA 2048, by openssl; and DIR/curl/.curlrc, with
# which (CURL_HOME=DIR/curl) the helpers above reach `127.0.0.1:PORT` over https, checked
# against that CA.
bench_certs() {
  local tls=$1
  mkdir -p "$tls/curl"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tls/ca.key" -out "$tls/ca.pem" -days 2 \
    -subj "/CN=paycred bench CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$tls/srv.key" -out "$tls/srv.csr" -subj /CN=localhost 2>/dev/null
  echo "subjectAltName=DNS:localhost,IP:127.0.0.1" >"$tls/ext.cnf"
  openssl x509 -req -in "$tls/srv.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
    -out "$tls/srv.pem" -days 2 -extfile "$tls/ext.cnf" 2>/dev/null
  printf 'proto-default = https\ncacert = "%s"\n' "$tls/ca.pem" >"$tls/curl/.curlrc"
}
