-- The audit trail: who asked for each client command (the caller the API
-- edge authenticated: token:ID, cert:NAME or insecure) and its role.
-- NULL for leader-internal commands (completions, ticks, ...) and for
-- entries written before callers were recorded.
ALTER TABLE lifecycle_events
    ADD COLUMN caller      TEXT,
    ADD COLUMN caller_role TEXT;
