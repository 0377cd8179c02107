-- An inbox input remembers the run whose work it is (the run the turn that sent it billed): a turn begun on it
-- after the run ended still bills the run. Inputs queued before say nothing (NULL): they bill as they did.
ALTER TABLE inbox ADD COLUMN run_id text;
