-- Events and messages move to rowid tables, so their pages fill up. Schema 1 kept them WITHOUT ROWID,
-- clustered on (session, seq) and (conversation, idx): such a table is a B-tree of keys, where a row over
-- ~1,000 bytes (most tool results and messages) keeps ~490 bytes in the leaf and puts the rest on an
-- overflow page of its own, mostly empty; and with many sessions writing at once, every insert landed in
-- the middle of the tree, splitting pages. A rowid table keeps rows of up to a page in its leaves, and
-- its rowids grow in insertion order, so new rows go to the last page and fill it. Uniqueness of
-- (session_id, seq) and (conversation_id, idx) stays, as indexes.
--
-- Conversations learn their seq range (first_seq, and end_seq once ended): a conversation's events are a
-- contiguous range of its session's seqs, so reading them needs no index of their own.

ALTER TABLE conversations ADD COLUMN first_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE conversations ADD COLUMN end_seq INTEGER;
UPDATE conversations SET
    first_seq = COALESCE((SELECT MIN(seq) FROM events WHERE events.conversation_id = conversations.id), 0),
    end_seq = CASE WHEN ended_at IS NULL THEN NULL
        ELSE (SELECT MAX(seq) FROM events WHERE events.conversation_id = conversations.id) END;

CREATE TABLE events_packed (
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    id              TEXT NOT NULL UNIQUE,
    type            TEXT NOT NULL,
    turn_id         TEXT,
    conversation_id TEXT,
    at              TEXT NOT NULL,
    payload         TEXT NOT NULL,
    UNIQUE (session_id, seq)
);
INSERT INTO events_packed (session_id, seq, id, type, turn_id, conversation_id, at, payload)
    SELECT session_id, seq, id, type, turn_id, conversation_id, at, payload FROM events ORDER BY session_id, seq;
DROP TABLE events;
ALTER TABLE events_packed RENAME TO events;
CREATE INDEX events_type ON events (session_id, type, seq);
CREATE INDEX events_turn ON events (turn_id) WHERE turn_id IS NOT NULL;

CREATE TABLE messages_packed (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    idx             INTEGER NOT NULL,
    body            TEXT NOT NULL,
    UNIQUE (conversation_id, idx)
);
INSERT INTO messages_packed (conversation_id, idx, body)
    SELECT conversation_id, idx, body FROM messages ORDER BY conversation_id, idx;
DROP TABLE messages;
ALTER TABLE messages_packed RENAME TO messages;
