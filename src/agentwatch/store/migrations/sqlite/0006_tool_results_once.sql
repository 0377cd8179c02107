-- A tool's output is stored once. The runtime writes each tool result twice in one write: as the `output`
-- of its tool.result event and as the content of a tool return in the next model-layer message. Such a
-- message row now holds the message with null at that content (`body`), the seq of the event (`event_seq`)
-- and the JSON path of the content (`event_path`); the `messages` view puts the output back in its place.
-- Rows written before keep their meaning: a body alone, or (body NULL) the `response` of the event.

ALTER TABLE message_rows ADD COLUMN event_path TEXT;
DROP VIEW messages;
CREATE VIEW messages (conversation_id, idx, body) AS
    SELECT m.conversation_id, m.idx, CASE WHEN m.event_seq IS NULL THEN m.body ELSE (
        SELECT CASE WHEN m.event_path IS NULL THEN json_extract(e.payload, '$.response')
            ELSE json_set(m.body, m.event_path, json_extract(e.payload, '$.output')) END
        FROM conversations c
        JOIN events e ON e.session_id = c.session_id AND e.seq = m.event_seq
        WHERE c.id = m.conversation_id) END
    FROM message_rows m;
