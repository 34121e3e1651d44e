#!/usr/bin/env bash
# The sync of rate limits shared across instances (docs/operations.md, "Rate limits on
# several instances"): the update of two buckets (a project's and an entity's) as paycred
# sends it to PostgreSQL (src/store/postgres/rate_limits.rs, the same statement and table),
# against the same refill-and-take written as a Redis script (EVALSHA), on a throwaway
# PostgreSQL cluster and a throwaway redis-server, both on 127.0.0.1, alternating, 3 x 5 s
# with 1 and with 8 clients (pgbench, redis-benchmark). Prints one line per run: syncs a
# second and the mean latency. Needs scripts/setup-bench (redis-server, redis-tools).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
command -v redis-server >/dev/null || { echo "rate_sync: redis-server is missing (scripts/setup-bench)" >&2; exit 1; }
work=$(mktemp -d)
chmod 755 "$work"
rpid=""
cleanup() {
  [ -n "$rpid" ] && kill "$rpid" 2>/dev/null || true
  stop_postgres "$work/pg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
url=$(start_postgres "$work/pg")
pg_port=$(echo "$url" | sed -E 's#.*:([0-9]+)/bench#\1#')
psql "$url" -q -f "$here/../../src/store/postgres/migrations/0010_rate_limit_buckets.sql"
cat >"$work/sync.sql" <<'SQL'
INSERT INTO rate_limit_buckets AS b (project, entity, per_second, burst, tokens, at) SELECT t.project, t.entity, t.per_second, t.burst, t.burst - t.taken, now() FROM unnest('{bench,bench}'::text[], '{"",e1}'::text[], '{1000,100}'::float8[], '{3000,300}'::float8[], '{3,3}'::float8[]) WITH ORDINALITY AS t(project, entity, per_second, burst, taken, n) ORDER BY t.n ON CONFLICT (project, entity) DO UPDATE SET per_second = EXCLUDED.per_second, burst = EXCLUDED.burst, tokens = LEAST(EXCLUDED.burst, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM now() - b.at)::float8) * EXCLUDED.per_second) - (EXCLUDED.burst - EXCLUDED.tokens), at = GREATEST(b.at, now()) RETURNING project, entity, tokens;
SQL
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
rpid=$!
for _ in $(seq 50); do redis-cli -p "$redis_port" PING >/dev/null 2>&1 && break; sleep 0.1; done
# The same refill (at the bucket's rate, up to its burst, by the server's clock) and take.
lua='local t = redis.call("TIME"); local now = t[1] + t[2] / 1e6; local out = {}
for i = 1, #KEYS do
  local rate, burst, taken = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local v = redis.call("HMGET", KEYS[i], "tokens", "at"); local tokens = burst
  if v[1] then tokens = math.min(burst, tonumber(v[1]) + math.max(0, now - tonumber(v[2])) * rate) end
  tokens = tokens - taken; redis.call("HSET", KEYS[i], "tokens", tokens, "at", now); out[i] = tostring(tokens)
end
return out'
sha=$(redis-cli -p "$redis_port" SCRIPT LOAD "$lua")
for clients in 1 8; do
  for rep in 1 2 3; do
    pg=$(pgbench -n -h 127.0.0.1 -p "$pg_port" -U postgres -c "$clients" -j 1 -T 5 -f "$work/sync.sql" bench 2>/dev/null)
    printf 'postgresql clients=%s rep=%s: %.0f syncs/s, %s ms mean\n' "$clients" "$rep" \
      "$(echo "$pg" | awk '/^tps/{print $3}')" "$(echo "$pg" | awk '/latency average/{print $4}')"
    rd=$(redis-benchmark -p "$redis_port" -c "$clients" -n $((clients * 40000)) --csv \
      EVALSHA "$sha" 2 rl:bench: rl:bench:e1 1000 3000 3 100 300 3 2>/dev/null | tail -1)
    printf 'redis      clients=%s rep=%s: %.0f syncs/s, %s ms mean\n' "$clients" "$rep" \
      "$(echo "$rd" | cut -d, -f2 | tr -d '"')" "$(echo "$rd" | cut -d, -f3 | tr -d '"')"
  done
done
