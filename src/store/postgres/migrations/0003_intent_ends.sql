-- Intents stored live, by when they end: the finalizer's query reads these partial indexes.
CREATE INDEX intents_live_expiry ON intents (expires_micros)
    WHERE status IN ('active', 'verify');
CREATE INDEX intents_live_used_up ON intents (project)
    WHERE status = 'active' AND usage_limit IS NOT NULL AND uses >= usage_limit;
