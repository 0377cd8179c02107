-- A stop asked by an engine that does not run the turn: the holder of the session's lease reads it (and clears
-- it) while it renews its leases, and stops the turn itself.
ALTER TABLE leases ADD COLUMN stop_by TEXT;
