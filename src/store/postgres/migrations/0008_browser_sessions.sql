-- Browser checkout's sessions (`store::browser_sessions::BrowserSessionRecord`: the stand-ins
-- sealed, the proxy password as a hash). `id` is unique across projects: it is the proxy's
-- user name. No two active sessions hold the same stand-in key (the stand-in number's keyed
-- hash); an ended session frees it.
CREATE TABLE browser_sessions (
    id text PRIMARY KEY,
    project text NOT NULL,
    entity text NOT NULL,
    intent_id text NOT NULL,
    status text NOT NULL,
    stand_in_key text NOT NULL,
    created_micros bigint NOT NULL,
    record jsonb NOT NULL
);

CREATE INDEX browser_sessions_by_intent ON browser_sessions (project, entity, intent_id);

CREATE UNIQUE INDEX browser_sessions_live_stand_in ON browser_sessions (stand_in_key)
    WHERE status = 'active';
