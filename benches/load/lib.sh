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

# wait_for_quiet [SECONDS]: waits (at most SECONDS, default 20) for a quiet machine: other
# load skews every number.
wait_for_quiet() {
  for _ in $(seq 1 "${1:-20}"); do
    python3 -c "import sys; sys.exit(0 if $(cut -d' ' -f1 /proc/loadavg) < 0.7 else 1)" && return
    sleep 1
  done
}
