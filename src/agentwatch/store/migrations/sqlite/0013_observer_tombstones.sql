-- A person's stop of an observer holds for its pairing (the observed session and the observer type), whatever
-- observer the session's ref names later: a role that names another observer type and then this one again
-- does not bring the stopped one back. The ref keeps naming the current pairing; a stopped one is kept here too.
CREATE TABLE observer_tombstones (
    observed_session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    observer_type       TEXT NOT NULL,
    observer_session_id TEXT,
    stopped_at          TEXT NOT NULL,
    PRIMARY KEY (observed_session_id, observer_type)
);
INSERT INTO observer_tombstones (observed_session_id, observer_type, observer_session_id, stopped_at)
SELECT observed_session_id, observer_type, observer_session_id, COALESCE(stopped_at, updated_at)
FROM observer_refs WHERE stopped;
