-- The initial schema. Times are ISO 8601 text in UTC with microseconds (fixed width, so text order is time
-- order); JSON documents are text; booleans are 0/1.

CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    display_name     TEXT,
    role             TEXT NOT NULL,
    feature          TEXT,
    scope            TEXT,
    status           TEXT NOT NULL,
    source           TEXT NOT NULL,
    model_ref        TEXT,
    model_override   TEXT,
    group_key        TEXT,
    boss             INTEGER NOT NULL DEFAULT 0,
    parent_id        TEXT,
    run_id           TEXT,
    origin           TEXT,
    is_observer      INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    last_active_at   TEXT NOT NULL,
    deleted_at       TEXT,
    reap_at          TEXT,
    last_seq         INTEGER NOT NULL DEFAULT 0,
    conversation_id  TEXT NOT NULL,
    current_turn_id  TEXT,
    turn_attempts    INTEGER NOT NULL DEFAULT 0,
    pending_inputs   INTEGER NOT NULL DEFAULT 0,
    pending_requests INTEGER NOT NULL DEFAULT 0,
    held_requests    INTEGER NOT NULL DEFAULT 0,
    tokens           INTEGER NOT NULL DEFAULT 0,
    cost_usd         REAL NOT NULL DEFAULT 0,
    last_text        TEXT,
    error            TEXT,
    context_fill     TEXT,
    interception     TEXT,
    settings         TEXT NOT NULL DEFAULT '{}',
    -- 1 while neither finished nor deleted: listings put these first. Computed by SQLite from status and
    -- deleted_at (the statuses are TERMINAL_STATUSES), so it can be indexed and never disagrees with them.
    live             INTEGER NOT NULL GENERATED ALWAYS AS (
        deleted_at IS NULL AND status NOT IN ('cancelled', 'completed', 'failed', 'interrupted')
    ) VIRTUAL
);

-- A name is unique among the live sessions of one scope; the global scope (NULL) counts as one scope too.
CREATE UNIQUE INDEX sessions_live_name ON sessions (COALESCE(scope, ''), name) WHERE deleted_at IS NULL;
-- One index per listing order (boss first, then live sessions, then the sort, then the id), so a page reads
-- its rows in order and stops, instead of sorting every match. status, role and deleted_at ride along so
-- the usual filters are checked in the index, before any row is read. `newest` is all one direction and
-- scanned backwards, which lets its keyset (a row-value comparison) start the scan at the cursor. No
-- separate status or role index: the planner would pick it and sort, which costs more at any size.
CREATE INDEX sessions_by_newest ON sessions (boss, live, last_active_at, id, status, role, deleted_at);
CREATE INDEX sessions_by_oldest ON sessions (boss DESC, live DESC, last_active_at, id, status, role, deleted_at);
CREATE INDEX sessions_by_name ON sessions (boss DESC, live DESC, name, id, status, role, deleted_at);
CREATE INDEX sessions_by_status ON sessions (boss DESC, live DESC, status, id, role, deleted_at);
CREATE INDEX sessions_name ON sessions (name);
CREATE INDEX sessions_group_key ON sessions (group_key) WHERE group_key IS NOT NULL;
CREATE INDEX sessions_parent_id ON sessions (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX sessions_run_id ON sessions (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX sessions_deleted ON sessions (deleted_at) WHERE deleted_at IS NOT NULL;
CREATE INDEX sessions_reap_at ON sessions (reap_at) WHERE reap_at IS NOT NULL;

CREATE TABLE conversations (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    started_at TEXT NOT NULL,
    ended_at   TEXT,
    end_reason TEXT
);
CREATE INDEX conversations_session ON conversations (session_id, started_at);

CREATE TABLE events (
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    id              TEXT NOT NULL UNIQUE,
    type            TEXT NOT NULL,
    turn_id         TEXT,
    conversation_id TEXT,
    at              TEXT NOT NULL,
    payload         TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE INDEX events_type ON events (session_id, type, seq);
CREATE INDEX events_conversation ON events (conversation_id, seq);
CREATE INDEX events_turn ON events (turn_id) WHERE turn_id IS NOT NULL;

CREATE TABLE messages (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    idx             INTEGER NOT NULL,
    body            TEXT NOT NULL,
    PRIMARY KEY (conversation_id, idx)
) WITHOUT ROWID;

CREATE TABLE inbox (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    text       TEXT NOT NULL,
    origin     TEXT,
    meta       INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    taken_at   TEXT
);
CREATE INDEX inbox_session ON inbox (session_id, created_at, id);

CREATE TABLE requests (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    kind         TEXT NOT NULL,
    summary      TEXT NOT NULL,
    questions    TEXT,
    options      TEXT,
    tool_call_id TEXT,
    turn_id      TEXT,
    waits_on     TEXT NOT NULL,
    deliver_at   TEXT,
    body         TEXT NOT NULL DEFAULT '{}',
    status       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    closed_at    TEXT,
    answer       TEXT,
    answered_by  TEXT
);
CREATE INDEX requests_session ON requests (session_id, created_at, id);
CREATE INDEX requests_status ON requests (status, created_at, id);

-- No foreign key: the ledger outlives the sessions it names, so spend stays countable after a reap.
CREATE TABLE usage_ledger (
    id                 TEXT PRIMARY KEY,
    session_id         TEXT NOT NULL,
    turn_id            TEXT,
    run_id             TEXT,
    role               TEXT,
    model              TEXT,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    requests           INTEGER NOT NULL,
    cost_usd           REAL,
    at                 TEXT NOT NULL
);
CREATE INDEX usage_ledger_session ON usage_ledger (session_id);
CREATE INDEX usage_ledger_at ON usage_ledger (at);

CREATE TABLE runs (
    id            TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    entity        TEXT,
    status        TEXT NOT NULL,
    input         TEXT,
    parent_run_id TEXT,
    brain_sha     TEXT,
    started_at    TEXT NOT NULL,
    ended_at      TEXT,
    status_reason TEXT,
    error         TEXT
);
CREATE INDEX runs_entity ON runs (entity, started_at);

CREATE TABLE spans (
    id             TEXT PRIMARY KEY,
    run_id         TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    parent_span_id TEXT,
    kind           TEXT NOT NULL,
    label          TEXT NOT NULL,
    status         TEXT NOT NULL,
    attempt        INTEGER NOT NULL,
    attempt_of     TEXT,
    ref            TEXT,
    started_at     TEXT NOT NULL,
    ended_at       TEXT,
    cost_usd       REAL NOT NULL DEFAULT 0,
    tokens         INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX spans_run ON spans (run_id, started_at, id);

CREATE TABLE journal (
    id      TEXT PRIMARY KEY,
    run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at      TEXT NOT NULL,
    kind    TEXT NOT NULL,
    message TEXT NOT NULL,
    detail  TEXT
);
CREATE INDEX journal_run ON journal (run_id, at, id);

CREATE TABLE observer_refs (
    observed_session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    observer_type       TEXT NOT NULL,
    observer_session_id TEXT,
    stopped             INTEGER NOT NULL DEFAULT 0,
    stopped_at          TEXT,
    updated_at          TEXT NOT NULL
);
