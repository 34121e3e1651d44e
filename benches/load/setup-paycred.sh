# Sourced by run.sh and instructions.sh: writes a one-thread paycred config for project
# `bench` into $work (Ed25519 JWT key pair, master key), listening on 127.0.0.1:$PC and
# allowed to reach the local target over http; `/metrics` with the
# bearer token in $work/metrics.token. Needs $bin, $work and $PC.
openssl genpkey -algorithm ed25519 -out "$work/key.pem" 2>/dev/null
openssl pkey -in "$work/key.pem" -pubout -out "$work/pub.pem"
"$bin" master-key --out "$work/master.key"
openssl rand -hex 32 >"$work/metrics.token"
cat >"$work/paycred.yaml" <<YAML
listen: 127.0.0.1:$PC
data_dir: $work/data
master_key_file: $work/master.key
server: {threads: 1, grace_period: 0s, graceful_shutdown_timeout: 1s}
metrics: {bearer_token_file: $work/metrics.token}
projects:
  - id: bench
    jwt: {keys: [{kid: k1, public_key_file: $work/pub.pem}], max_lifetime: 1h}
    pan: enabled
    proxy: {allowed_hosts: [127.0.0.1], allow_http: true, allow_private_networks: true}
YAML
