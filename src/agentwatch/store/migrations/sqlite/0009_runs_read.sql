-- Run reads: what a run billed (run_trace, run_compare) and a run listing newest first (run_list).
CREATE INDEX usage_ledger_run ON usage_ledger (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX runs_newest ON runs (started_at, id);
