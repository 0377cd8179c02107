-- The initial schema. Ordered text columns use the "C" collation so listings sort by code point, the same
-- order on every server (and as on SQLite).

CREATE TABLE sessions (
    id               text COLLATE "C" PRIMARY KEY,
    name             text COLLATE "C" NOT NULL,
    display_name     text,
    role             text NOT NULL,
    feature          text,
    scope            text,
    status           text COLLATE "C" NOT NULL,
    source           text NOT NULL,
    model_ref        text,
    model_override   text,
    group_key        text,
    boss             boolean NOT NULL DEFAULT false,
    parent_id        text,
    run_id           text,
    origin           jsonb,
    is_observer      boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    last_active_at   timestamptz NOT NULL,
    deleted_at       timestamptz,
    reap_at          timestamptz,
    last_seq         bigint NOT NULL DEFAULT 0,
    conversation_id  text NOT NULL,
    current_turn_id  text,
    turn_attempts    integer NOT NULL DEFAULT 0,
    pending_inputs   integer NOT NULL DEFAULT 0,
    pending_requests integer NOT NULL DEFAULT 0,
    held_requests    integer NOT NULL DEFAULT 0,
    tokens           bigint NOT NULL DEFAULT 0,
    cost_usd         double precision NOT NULL DEFAULT 0,
    last_text        text,
    error            text,
    context_fill     jsonb,
    interception     jsonb,
    settings         jsonb NOT NULL DEFAULT '{}',
    -- True while neither finished nor deleted: listings put these first. Computed from status and deleted_at
    -- (the statuses are TERMINAL_STATUSES), so it can be indexed and never disagrees with them.
    live             boolean NOT NULL GENERATED ALWAYS AS (
        deleted_at IS NULL AND status NOT IN ('cancelled', 'completed', 'failed', 'interrupted')
    ) STORED
);

-- A name is unique among the live sessions of one scope; the global scope (NULL) counts as one scope too.
CREATE UNIQUE INDEX sessions_live_name ON sessions ((COALESCE(scope, '')), name) WHERE deleted_at IS NULL;
-- One index per listing order (boss first, then live sessions, then the sort, then the id), so a page reads
-- its rows in order and stops, instead of sorting every match. status, role and deleted_at ride along so
-- the usual filters are checked in the index, before any row is read. `newest` is all one direction and
-- scanned backwards, which lets its keyset (a row-value comparison) start the scan at the cursor.
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
    id         text PRIMARY KEY,
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz,
    end_reason text
);
CREATE INDEX conversations_session ON conversations (session_id, started_at);

CREATE TABLE events (
    session_id      text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq             bigint NOT NULL,
    id              text NOT NULL UNIQUE,
    type            text NOT NULL,
    turn_id         text,
    conversation_id text,
    at              timestamptz NOT NULL,
    payload         jsonb NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX events_type ON events (session_id, type, seq);
CREATE INDEX events_conversation ON events (conversation_id, seq);
CREATE INDEX events_turn ON events (turn_id) WHERE turn_id IS NOT NULL;

CREATE TABLE messages (
    conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    idx             integer NOT NULL,
    body            jsonb NOT NULL,
    PRIMARY KEY (conversation_id, idx)
);

CREATE TABLE inbox (
    id         text PRIMARY KEY,
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    text       text NOT NULL,
    origin     jsonb,
    meta       boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    taken_at   timestamptz
);
CREATE INDEX inbox_session ON inbox (session_id, created_at, id);

CREATE TABLE requests (
    id           text PRIMARY KEY,
    session_id   text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    kind         text NOT NULL,
    summary      text NOT NULL,
    questions    jsonb,
    options      jsonb,
    tool_call_id text,
    turn_id      text,
    waits_on     text NOT NULL,
    deliver_at   timestamptz,
    body         jsonb NOT NULL DEFAULT '{}',
    status       text NOT NULL,
    created_at   timestamptz NOT NULL,
    closed_at    timestamptz,
    answer       jsonb,
    answered_by  text
);
CREATE INDEX requests_session ON requests (session_id, created_at, id);
CREATE INDEX requests_status ON requests (status, created_at, id);

-- No foreign key: the ledger outlives the sessions it names, so spend stays countable after a reap.
CREATE TABLE usage_ledger (
    id                 text PRIMARY KEY,
    session_id         text NOT NULL,
    turn_id            text,
    run_id             text,
    role               text,
    model              text,
    input_tokens       bigint NOT NULL,
    output_tokens      bigint NOT NULL,
    cache_read_tokens  bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    reasoning_tokens   bigint NOT NULL,
    requests           bigint NOT NULL,
    cost_usd           double precision,
    at                 timestamptz NOT NULL
);
CREATE INDEX usage_ledger_session ON usage_ledger (session_id);
CREATE INDEX usage_ledger_at ON usage_ledger (at);

CREATE TABLE runs (
    id            text PRIMARY KEY,
    kind          text NOT NULL,
    entity        text,
    status        text NOT NULL,
    input         jsonb,
    parent_run_id text,
    brain_sha     text,
    started_at    timestamptz NOT NULL,
    ended_at      timestamptz,
    status_reason text,
    error         jsonb
);
CREATE INDEX runs_entity ON runs (entity, started_at);

CREATE TABLE spans (
    id             text PRIMARY KEY,
    run_id         text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    parent_span_id text,
    kind           text NOT NULL,
    label          text NOT NULL,
    status         text NOT NULL,
    attempt        integer NOT NULL,
    attempt_of     text,
    ref            jsonb,
    started_at     timestamptz NOT NULL,
    ended_at       timestamptz,
    cost_usd       double precision NOT NULL DEFAULT 0,
    tokens         bigint NOT NULL DEFAULT 0
);
CREATE INDEX spans_run ON spans (run_id, started_at, id);

CREATE TABLE journal (
    id      text PRIMARY KEY,
    run_id  text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at      timestamptz NOT NULL,
    kind    text NOT NULL,
    message text NOT NULL,
    detail  jsonb
);
CREATE INDEX journal_run ON journal (run_id, at, id);

CREATE TABLE observer_refs (
    observed_session_id text PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    observer_type       text NOT NULL,
    observer_session_id text,
    stopped             boolean NOT NULL DEFAULT false,
    stopped_at          timestamptz,
    updated_at          timestamptz NOT NULL
);
