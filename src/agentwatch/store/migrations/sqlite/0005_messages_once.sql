-- A model response is stored once. The runtime writes each model response twice in one write: as the
-- `response` of its completion.finished event and as a model-layer message, the same document. A message
-- row now either holds its body, or (body NULL) names the event of its session whose `response` it is
-- (`event_seq`). The `messages` view gives every message its body as before, so reads do not change.

CREATE TABLE message_rows (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    idx             INTEGER NOT NULL,
    body            TEXT,
    event_seq       INTEGER,
    UNIQUE (conversation_id, idx)
);
INSERT INTO message_rows (conversation_id, idx, body)
    SELECT conversation_id, idx, body FROM messages ORDER BY conversation_id, idx;
DROP TABLE messages;
CREATE VIEW messages (conversation_id, idx, body) AS
    SELECT m.conversation_id, m.idx, COALESCE(m.body, (
        SELECT json_extract(e.payload, '$.response') FROM conversations c
        JOIN events e ON e.session_id = c.session_id AND e.seq = m.event_seq
        WHERE c.id = m.conversation_id))
    FROM message_rows m;
