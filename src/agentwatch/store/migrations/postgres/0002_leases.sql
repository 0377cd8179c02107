-- Leases: which process owns a session's turns, until when. Expiry is decided by the server's clock
-- (clock_timestamp()), never a client's, so processes on machines whose clocks disagree still agree on it.

CREATE TABLE leases (
    session_id text PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    owner      text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX leases_expires_at ON leases (expires_at);
