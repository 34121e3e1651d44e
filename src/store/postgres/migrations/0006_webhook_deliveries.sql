-- Webhook deliveries (`store::deliveries`). Every event gets a fan-out marker in its own
-- transaction; fanning out turns a marker into one delivery per matching endpoint and removes
-- it, in one transaction.
CREATE TABLE webhook_fanout (
    seq bigint PRIMARY KEY
);

-- One event on its way to one endpoint. `next_micros` is the next attempt's time while
-- pending, or the end of a claim's lease while an instance sends it.
CREATE TABLE webhook_deliveries (
    id bigserial PRIMARY KEY,
    project text NOT NULL,
    event_seq bigint NOT NULL,
    endpoint_id text NOT NULL,
    attempts integer NOT NULL,
    next_micros bigint NOT NULL,
    status text NOT NULL,
    last_outcome text,
    created_micros bigint NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_micros) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_of_event ON webhook_deliveries (project, event_seq);
