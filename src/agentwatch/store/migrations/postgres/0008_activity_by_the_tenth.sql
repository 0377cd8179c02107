-- The activity listings' indexes hold the tenth of a second of a session's last activity, not the exact
-- time, so that an append, which moves `last_active_at` every time, changes no indexed value while its
-- tenth stays. Such an update is HOT: PostgreSQL writes the row's new version beside the old one and none of
-- the table's indexes (an update that changes an indexed value inserts into every one of them: most of the
-- server's time in a group of appends, measured). The listings order by the tenth, then by the exact time
-- within it, which is the same order; only the rows of one tenth are sorted when a page is read.
-- `active_tenth` is computed by the server from `last_active_at` (UTC, without zone), so no write names it.
ALTER TABLE sessions ADD COLUMN active_tenth timestamp NOT NULL
    GENERATED ALWAYS AS (date_bin('100 milliseconds', last_active_at AT TIME ZONE 'UTC', '2000-01-01')) STORED;
DROP INDEX sessions_by_newest;
DROP INDEX sessions_by_oldest;
CREATE INDEX sessions_by_newest ON sessions (boss, live, active_tenth, id, status, role, deleted_at);
CREATE INDEX sessions_by_oldest ON sessions (boss DESC, live DESC, active_tenth, id, status, role, deleted_at);
