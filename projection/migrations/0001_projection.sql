-- Palisade's read projection (palisade-projection), schema version 1.
--
-- Every row here is derived from the replicated state by applying committed
-- Raft log entries in order; nothing else writes these tables. Log indexes,
-- versions and times are BIGINT (the state's u64 values stay below 2^63).
-- Names use the "C" collation so that ORDER BY (workspace, name) is the
-- byte order the replicated state lists in, whatever the server's locale.

-- Where the projection stands: the last log entry it reflects. Exactly one
-- row. Every batch advances it with a guarded UPDATE in the same
-- transaction as the rows it writes, so each entry is applied exactly once.
CREATE TABLE projection_checkpoint (
    singleton     BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    applied_index BIGINT NOT NULL CHECK (applied_index >= 0),
    applied_term  BIGINT NOT NULL CHECK (applied_term >= 0),
    -- The cluster whose log this is (not secret); guards against pointing
    -- two clusters at one database.
    cluster_id    TEXT,
    -- Node id of the replica that wrote the last batch.
    projected_by  BIGINT,
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO projection_checkpoint (applied_index, applied_term) VALUES (0, 0);

-- The lifecycle state at some checkpoint (JSON of palisade_lifecycle::State
-- without the cluster's token secret and the SSH token digests, which apply
-- never reads), written by the first batch and then every thousand entries,
-- in the same transaction as the checkpoint. A projector that starts (or
-- takes over) loads it and replays the log from it, without writing, up to
-- the checkpoint: that is how it knows the outcome of every later entry.
CREATE TABLE projection_shadow (
    singleton     BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    applied_index BIGINT NOT NULL CHECK (applied_index >= 0),
    applied_term  BIGINT NOT NULL CHECK (applied_term >= 0),
    state         BYTEA NOT NULL
);

-- Every time the projection was rebuilt from a replica's state because the
-- log entries after its checkpoint had been compacted away: the events of
-- indexes from_index+1 ..= to_index are missing from lifecycle_events.
CREATE TABLE projection_resyncs (
    id           BIGSERIAL PRIMARY KEY,
    from_index   BIGINT NOT NULL,
    to_index     BIGINT NOT NULL,
    to_term      BIGINT NOT NULL,
    projected_by BIGINT,
    resynced_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE workspaces (
    name             TEXT COLLATE "C" PRIMARY KEY,
    id               TEXT NOT NULL,
    phase            TEXT NOT NULL CHECK (phase IN ('ACTIVE', 'TERMINATING')),
    resource_version BIGINT NOT NULL,
    created_at_ms    BIGINT NOT NULL
);

CREATE TABLE sandboxes (
    id               TEXT PRIMARY KEY,
    workspace        TEXT COLLATE "C" NOT NULL REFERENCES workspaces (name),
    name             TEXT COLLATE "C" NOT NULL,
    phase            TEXT NOT NULL CHECK (phase IN ('PROVISIONING', 'READY', 'STOPPING',
                         'STOPPED', 'STARTING', 'DELETING', 'ERROR', 'COMPLETED', 'UNKNOWN')),
    -- The current execution's generation (details in executions).
    generation       BIGINT NOT NULL,
    labels           JSONB NOT NULL,
    annotations      JSONB NOT NULL,
    -- palisade_lifecycle::SandboxSpec as JSON.
    spec             JSONB NOT NULL,
    resource_version BIGINT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    message          TEXT,
    -- The operation in flight (palisade_lifecycle::Operation as JSON), if any.
    operation        JSONB,
    host_identity    TEXT NOT NULL,
    restart_count    INTEGER NOT NULL,
    UNIQUE (workspace, name)
);
-- Label selectors are JSONB containment (labels @> '{"team":"a"}').
CREATE INDEX sandboxes_labels ON sandboxes USING GIN (labels jsonb_path_ops);
CREATE INDEX sandboxes_phase ON sandboxes (phase);

-- The current execution of each sandbox (the history of generations is in
-- lifecycle_events).
CREATE TABLE executions (
    sandbox_id TEXT PRIMARY KEY REFERENCES sandboxes (id),
    generation BIGINT NOT NULL,
    handle     TEXT,
    driver     TEXT,
    exit_code  INTEGER
);

-- Open SSH sessions. Never the token, nor its digest: only what a
-- dashboard needs.
CREATE TABLE ssh_sessions (
    sandbox_id    TEXT NOT NULL REFERENCES sandboxes (id),
    id            TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (sandbox_id, id)
);

CREATE TABLE policies (
    sandbox_id    TEXT PRIMARY KEY REFERENCES sandboxes (id),
    version       BIGINT NOT NULL,
    document      TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

-- The audit trail: every committed lifecycle command, once, by log index.
-- Leader blank entries and membership changes are not lifecycle commands
-- and are not recorded. Append-only (see the trigger below).
CREATE TABLE lifecycle_events (
    log_index       BIGINT PRIMARY KEY,
    term            BIGINT NOT NULL,
    -- Command::name(): BeginCreate, CompleteDelete, Tick, ...
    command         TEXT NOT NULL,
    -- The Outcome variant (OperationBegun, Completed, Ignored, ...), or
    -- Rejected.
    outcome         TEXT NOT NULL,
    -- The stable ErrorInfo reason of a rejection (NAME_TAKEN, ...).
    reason          TEXT,
    -- The rejection's message.
    message         TEXT,
    workspace       TEXT,
    sandbox_id      TEXT,
    request_id      TEXT,
    -- The time the proposer wrote into the command, when it carries one.
    command_time_ms BIGINT,
    -- The full response (palisade_lifecycle::Response as JSON). The command
    -- itself is not stored: it may carry the cluster's token secret.
    response        JSONB NOT NULL,
    projected_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX lifecycle_events_sandbox ON lifecycle_events (sandbox_id, log_index);

CREATE FUNCTION lifecycle_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'lifecycle_events is append-only';
END;
$$;
CREATE TRIGGER lifecycle_events_append_only
    BEFORE UPDATE OR DELETE ON lifecycle_events
    FOR EACH ROW EXECUTE FUNCTION lifecycle_events_append_only();
