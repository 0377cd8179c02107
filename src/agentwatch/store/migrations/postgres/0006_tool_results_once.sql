-- The column SQLite's migration 6 adds, so both backends insert message rows alike. PostgreSQL keeps every
-- tool return in its message (it compresses large values itself), so the column stays NULL here and the
-- `messages` view does not change.

ALTER TABLE message_rows ADD COLUMN event_path text;
