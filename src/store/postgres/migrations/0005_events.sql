-- Events of committed changes, written in the change's transaction (`store::events`). The
-- event's id is `evt_` and `seq` in 16 hex digits; lists read one project's, newest first.
CREATE TABLE events (
    seq bigserial PRIMARY KEY,
    project text NOT NULL,
    type text NOT NULL,
    -- The event (type, project, time and the record without secrets), as `store::events`
    -- writes it.
    event jsonb NOT NULL
);
CREATE INDEX events_newest ON events (project, seq DESC);
CREATE INDEX events_newest_of_type ON events (project, type, seq DESC);

-- Webhook endpoints of a project (`store::records::WebhookEndpointRecord`; its signing
-- secrets sealed inside the record).
CREATE TABLE webhook_endpoints (
    project text NOT NULL,
    id text NOT NULL,
    created_micros bigint NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (project, id)
);
