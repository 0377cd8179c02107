-- An observer's reports waiting in an agent's inbox are counted apart from its pending inputs: a report is no work
-- someone gave the agent. Reports already waiting move from the one counter to the other.
ALTER TABLE sessions ADD COLUMN pending_reports integer NOT NULL DEFAULT 0;
UPDATE sessions SET pending_reports = (
    SELECT count(*) FROM inbox
    WHERE inbox.session_id = sessions.id AND inbox.taken_at IS NULL
        AND inbox.origin::json ->> 'kind' = 'observer'
)
WHERE id IN (SELECT session_id FROM inbox WHERE taken_at IS NULL);
UPDATE sessions SET pending_inputs = greatest(pending_inputs - pending_reports, 0) WHERE pending_reports > 0;
