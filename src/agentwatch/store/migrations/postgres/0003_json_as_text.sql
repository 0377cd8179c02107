-- JSON documents are kept as text, as on SQLite: jsonb refuses the escape \u0000 (a NUL in a tool result or a
-- model's text), text keeps any JSON losslessly. Nothing queries inside the documents; they are decoded by
-- their own models on read.

ALTER TABLE sessions
    ALTER COLUMN origin TYPE text USING origin::text,
    ALTER COLUMN context_fill TYPE text USING context_fill::text,
    ALTER COLUMN interception TYPE text USING interception::text,
    ALTER COLUMN settings DROP DEFAULT,
    ALTER COLUMN settings TYPE text USING settings::text,
    ALTER COLUMN settings SET DEFAULT '{}';
ALTER TABLE events ALTER COLUMN payload TYPE text USING payload::text;
ALTER TABLE messages ALTER COLUMN body TYPE text USING body::text;
ALTER TABLE inbox ALTER COLUMN origin TYPE text USING origin::text;
ALTER TABLE requests
    ALTER COLUMN questions TYPE text USING questions::text,
    ALTER COLUMN options TYPE text USING options::text,
    ALTER COLUMN body DROP DEFAULT,
    ALTER COLUMN body TYPE text USING body::text,
    ALTER COLUMN body SET DEFAULT '{}',
    ALTER COLUMN answer TYPE text USING answer::text;
ALTER TABLE runs
    ALTER COLUMN input TYPE text USING input::text,
    ALTER COLUMN error TYPE text USING error::text;
ALTER TABLE spans ALTER COLUMN ref TYPE text USING ref::text;
ALTER TABLE journal ALTER COLUMN detail TYPE text USING detail::text;
