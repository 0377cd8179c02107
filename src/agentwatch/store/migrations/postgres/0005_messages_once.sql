-- A model response is stored once. The runtime writes each model response twice in one write: as the
-- `response` of its completion.finished event and as a model-layer message, the same document. A message
-- row now either holds its body, or (body NULL) names the event of its session whose `response` it is
-- (`event_seq`). The `messages` view gives every message its body as before (`json ->` keeps the text of
-- the document as it was written), so reads do not change.

ALTER TABLE messages RENAME TO message_rows;
ALTER TABLE message_rows ALTER COLUMN body DROP NOT NULL;
ALTER TABLE message_rows ADD COLUMN event_seq bigint;
CREATE VIEW messages (conversation_id, idx, body) AS
    SELECT m.conversation_id, m.idx, COALESCE(m.body, (
        SELECT (e.payload::json -> 'response')::text FROM conversations c
        JOIN events e ON e.session_id = c.session_id AND e.seq = m.event_seq
        WHERE c.id = m.conversation_id))
    FROM message_rows m;
