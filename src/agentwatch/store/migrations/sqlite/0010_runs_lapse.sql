-- A run's process renews its expiry while the run is open; a run whose process died lapses, and an engine's
-- maintenance ends it `interrupted` instead of leaving it `running` for ever.
ALTER TABLE runs ADD COLUMN expires_at TEXT;
CREATE INDEX runs_open ON runs (expires_at) WHERE status = 'running';
