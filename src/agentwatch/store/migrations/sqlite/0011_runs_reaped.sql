-- Retention reaps runs that ended long ago (skipped heartbeat ticks sooner), oldest first, with their spans
-- and journal.
CREATE INDEX runs_ended ON runs (ended_at) WHERE ended_at IS NOT NULL;
