-- paycred's tables. Card numbers, cvcs, credentials and keys appear only sealed (AES-GCM
-- with the record's place as associated data) or wrapped by the master key, inside the JSON
-- records and bytea values; the columns beside them are what the store queries.

CREATE TABLE payment_methods (
    project text NOT NULL,
    entity text NOT NULL,
    id text NOT NULL,
    created_micros bigint NOT NULL,
    fingerprint text NOT NULL,
    verified boolean NOT NULL DEFAULT false,
    record jsonb NOT NULL,
    PRIMARY KEY (project, entity, id)
);
-- One card per entity: a second create of the same card finds the first (dedup).
CREATE UNIQUE INDEX payment_methods_fingerprint ON payment_methods (project, entity, fingerprint);
CREATE INDEX payment_methods_newest ON payment_methods (project, entity, created_micros DESC, id);

CREATE TABLE intents (
    project text NOT NULL,
    entity text NOT NULL,
    id text NOT NULL,
    payment_method_id text NOT NULL,
    status text NOT NULL,
    created_micros bigint NOT NULL,
    expires_micros bigint NOT NULL,
    usage_limit bigint,
    uses bigint NOT NULL DEFAULT 0,
    -- The rest of the record (its `status` and `uses` are the columns').
    record jsonb NOT NULL,
    PRIMARY KEY (project, entity, id)
);
CREATE INDEX intents_of_payment_method ON intents (project, entity, payment_method_id, created_micros DESC, id);

CREATE TABLE card_tokens (
    project text NOT NULL,
    entity text NOT NULL,
    id text NOT NULL,
    expires_micros bigint NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (project, entity, id)
);

CREATE TABLE idempotency (
    project text NOT NULL,
    entity text NOT NULL,
    key text NOT NULL,
    expires_micros bigint NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (project, entity, key)
);
CREATE INDEX idempotency_expiry ON idempotency (expires_micros);

CREATE TABLE keyrings (
    project text PRIMARY KEY,
    keyring bytea NOT NULL
);

CREATE TABLE client_keys (
    project text PRIMARY KEY,
    keyset bytea NOT NULL
);

-- Events of committed changes, written in the change's transaction, waiting to be chained.
CREATE TABLE audit_outbox (
    n bigserial PRIMARY KEY,
    event jsonb NOT NULL
);

-- The chained log: one order for every instance (chained under an advisory lock).
CREATE TABLE audit_log (
    seq bigint PRIMARY KEY,
    event jsonb NOT NULL,
    prev_hash text NOT NULL,
    hash text NOT NULL
);

-- The chain head, recorded apart from the log in the same transaction.
CREATE TABLE audit_head (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq bigint NOT NULL,
    hash text NOT NULL
);
