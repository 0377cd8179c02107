-- `live` computes the same as before, without an IN list. SQLite builds such a list as a temporary table each
-- time it evaluates the expression, and an update of a session's activity time evaluates `live` twice (for
-- the listing indexes that hold it, before and after), so the list was about half the cost of the session
-- update every append makes. A virtual column stores nothing and the indexes hold the same values, so only
-- its text in the schema changes (SQLite's documented way to change a table's definition without touching
-- its content: writable_schema). RESET makes this connection read the schema again; another connection keeps
-- the old, equivalent expression until it opens the file again.
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, 'status NOT IN (''cancelled'', ''completed'', ''failed'', ''interrupted'')', 'status <> ''cancelled'' AND status <> ''completed'' AND status <> ''failed'' AND status <> ''interrupted''') WHERE type = 'table' AND name = 'sessions';
PRAGMA writable_schema = RESET;
