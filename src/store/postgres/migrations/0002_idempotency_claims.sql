-- The request running an Idempotency-Key, whichever instance it is on; a claim lapses at
-- lease_until_micros, so a crashed instance never locks a key for longer.
CREATE TABLE idempotency_claims (
    project text NOT NULL,
    entity text NOT NULL,
    key text NOT NULL,
    lease_until_micros bigint NOT NULL,
    PRIMARY KEY (project, entity, key)
);
