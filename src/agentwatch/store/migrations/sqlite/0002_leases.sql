-- Leases: which process owns a session's turns, until when. Expiry times are this machine's clock (the
-- same ISO 8601 UTC text as every other time), so text order is expiry order.

CREATE TABLE leases (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    owner      TEXT NOT NULL,
    expires_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX leases_expires_at ON leases (expires_at);
