-- Conversations learn their seq range (first_seq, and end_seq once ended): a conversation's events are a
-- contiguous range of its session's seqs, so reading them needs no index of their own (SQLite's migration 4
-- also repacks its tables; PostgreSQL's heap has nothing to repack).

ALTER TABLE conversations ADD COLUMN first_seq bigint NOT NULL DEFAULT 0, ADD COLUMN end_seq bigint;
UPDATE conversations SET
    first_seq = COALESCE((SELECT MIN(seq) FROM events WHERE events.conversation_id = conversations.id), 0),
    end_seq = CASE WHEN ended_at IS NULL THEN NULL
        ELSE (SELECT MAX(seq) FROM events WHERE events.conversation_id = conversations.id) END;
DROP INDEX events_conversation;
