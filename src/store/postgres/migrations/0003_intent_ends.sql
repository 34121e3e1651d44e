-- Intents stored live, by when they end: the finalizer's query reads these partial indexes.
CREATE INDEX intents_live_expiry ON intents (expires_micros)
    WHERE status IN ('active', 'verify');
CREATE INDEX intents_live_used_up ON intents (project)
    WHERE status = 'active' AND usage_limit IS NOT NULL AND uses >= usage_limit;

-- The wrapped key of each live intent's credential, apart from the intent's row: the end
-- deletes it, and a periodic VACUUM of this small table removes the dead rows.
CREATE TABLE intent_keys (
    project text NOT NULL,
    entity text NOT NULL,
    id text NOT NULL,
    key text NOT NULL,
    PRIMARY KEY (project, entity, id)
);
