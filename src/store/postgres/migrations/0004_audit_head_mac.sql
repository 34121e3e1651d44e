-- The recorded audit head's MAC (`<master key id>:<HMAC-SHA256 hex>`): empty for a head
-- recorded before heads were MACed.
ALTER TABLE audit_head ADD COLUMN mac text NOT NULL DEFAULT '';
