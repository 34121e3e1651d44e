-- Passkeys of an entity (`store::records::PasskeyRecord`: the WebAuthn credential, its public
-- key and signature counter; nothing secret).
CREATE TABLE passkeys (
    project text NOT NULL,
    entity text NOT NULL,
    id text NOT NULL,
    created_micros bigint NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (project, entity, id)
);

-- WebAuthn ceremonies under way (`store::records::WebauthnStateRecord`): taken once (deleted
-- when read), refused after expires_micros, expired ones dropped when the entity starts another.
CREATE TABLE webauthn_states (
    project text NOT NULL,
    entity text NOT NULL,
    key text NOT NULL,
    expires_micros bigint NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (project, entity, key)
);
