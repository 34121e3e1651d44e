-- Token buckets of rate limits that every instance spends from together
-- (`store::rate_limits`): a project's own bucket (entity '') and each entity's. `tokens` is
-- the count at `at` (the database's clock); from then the bucket refills at `per_second`, up
-- to `burst`. A bucket refilled to its burst is the same as none: the store deletes those in
-- the background. UNLOGGED: a bucket is not worth a WAL record (nor a synchronous standby's
-- round trip); after a crash or a failover the buckets start full.
CREATE UNLOGGED TABLE rate_limit_buckets (
    project text NOT NULL,
    entity text NOT NULL,
    per_second double precision NOT NULL,
    burst double precision NOT NULL,
    tokens double precision NOT NULL,
    at timestamptz NOT NULL,
    PRIMARY KEY (project, entity)
);
