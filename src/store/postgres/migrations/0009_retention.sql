-- Retention (`store::retention`): what ages out, found by time through these indexes.
-- When an intent ended (its record's `ended_micros`; an `unavailable` one at its creation).
-- An intent that ended before the column existed counts as ended now: it is kept a full
-- retention period from this migration.
ALTER TABLE intents ADD COLUMN ended_micros bigint;
UPDATE intents SET ended_micros = CASE
        WHEN status = 'unavailable' THEN COALESCE((record->>'ended_micros')::bigint, created_micros)
        ELSE COALESCE((record->>'ended_micros')::bigint,
                      (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
    END
    WHERE status NOT IN ('active', 'verify');
CREATE INDEX intents_ended ON intents (ended_micros) WHERE ended_micros IS NOT NULL;

-- Events by the time they were written.
CREATE INDEX events_created ON events (((event->>'created_micros')::bigint));

-- Finished deliveries by their last attempt (`next_micros`, the end of that attempt's lease).
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (next_micros)
    WHERE status <> 'pending';
