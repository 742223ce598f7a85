-- One round trip per projected batch (issue 18): the statements of a
-- batch, in the order and with the guards the batch transaction had
-- (palisade-projection, store.rs, "The batch, in order"), in a function
-- that the projector calls as a single statement. A statement outside an
-- explicit transaction is its own transaction, so the batch is still
-- applied entirely or not at all; a batch that was ~6 round trips (BEGIN,
-- the checkpoint, the deletes, the upserts, the events, COMMIT) is one,
-- which on a loaded machine is most of its time: every round trip waits
-- for the server's backend and then the projector to be scheduled again.
--
-- The guard: the checkpoint must be at p_from_index (and below
-- p_to_index). If it is not, nothing is written and the call fails with
-- SQLSTATE PLS01, which the projector reads as "the checkpoint moved" (a
-- second projector won the race).
--
-- A call with p_from_index NULL leaves the checkpoint alone and only
-- writes rows: the projector makes such calls only inside a transaction
-- whose first call advanced the checkpoint (a batch with more rows than
-- one call carries, a resync), one chunk of one set per call, in the
-- order below.
--
-- Parameters are column arrays, one element per row.
CREATE FUNCTION palisade_project_batch(
    p_node_id bigint, p_from_index bigint, p_to_index bigint, p_to_term bigint,
    p_cluster_id text, p_channel text,
    -- deletes
    p_sandboxes_removed text[], p_sessions_cleared text[],
    p_sessions_removed_sandbox text[], p_sessions_removed_id text[],
    p_policies_removed text[], p_workspaces_removed text[],
    -- workspaces
    p_ws_name text[], p_ws_id text[], p_ws_phase text[], p_ws_version int8[], p_ws_created int8[],
    -- sandboxes and their executions
    p_sb_id text[], p_sb_workspace text[], p_sb_name text[], p_sb_phase text[],
    p_sb_generation int8[], p_sb_labels jsonb[], p_sb_annotations jsonb[], p_sb_spec jsonb[],
    p_sb_version int8[], p_sb_created int8[], p_sb_message text[], p_sb_operation jsonb[],
    p_sb_host_identity text[], p_sb_restart_count int4[],
    p_ex_handle text[], p_ex_driver text[], p_ex_exit_code int4[],
    -- sessions
    p_se_sandbox text[], p_se_id text[], p_se_created int8[], p_se_expires int8[],
    -- policies
    p_po_sandbox text[], p_po_version int8[], p_po_document text[], p_po_updated int8[],
    -- events
    p_ev_index int8[], p_ev_term int8[], p_ev_command text[], p_ev_outcome text[],
    p_ev_reason text[], p_ev_message text[], p_ev_workspace text[], p_ev_sandbox text[],
    p_ev_request text[], p_ev_time int8[], p_ev_response jsonb[], p_ev_caller text[],
    p_ev_caller_role text[],
    -- the shadow state, when due (NULL otherwise)
    p_shadow_index bigint, p_shadow_term bigint, p_shadow bytea
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- 1. The guarded checkpoint update: takes the row's lock, so a second
    --    projector's call queues behind this one and then finds the
    --    checkpoint moved. The NOTIFY is delivered at commit, and only
    --    then.
    IF p_from_index IS NOT NULL THEN
        UPDATE projection_checkpoint
           SET applied_index = p_to_index, applied_term = p_to_term,
               cluster_id = COALESCE(p_cluster_id, cluster_id),
               projected_by = p_node_id, updated_at = now()
         WHERE applied_index < p_to_index AND applied_index = p_from_index;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the projection checkpoint is no longer at %', p_from_index
                USING ERRCODE = 'PLS01';
        END IF;
        PERFORM pg_notify(p_channel, json_build_object('index', p_to_index,
                                                       'term', p_to_term)::text);
    END IF;

    -- 2. Deletes, children before parents.
    IF cardinality(p_sandboxes_removed) > 0 THEN
        WITH removed_sessions AS (DELETE FROM ssh_sessions WHERE sandbox_id = ANY(p_sandboxes_removed)),
             removed_policies AS (DELETE FROM policies WHERE sandbox_id = ANY(p_sandboxes_removed)),
             removed_executions AS (DELETE FROM executions WHERE sandbox_id = ANY(p_sandboxes_removed))
        DELETE FROM sandboxes WHERE id = ANY(p_sandboxes_removed);
    END IF;
    IF cardinality(p_sessions_cleared) > 0 THEN
        DELETE FROM ssh_sessions WHERE sandbox_id = ANY(p_sessions_cleared);
    END IF;
    IF cardinality(p_sessions_removed_id) > 0 THEN
        DELETE FROM ssh_sessions AS s
         USING unnest(p_sessions_removed_sandbox, p_sessions_removed_id) AS d(sandbox_id, id)
         WHERE s.sandbox_id = d.sandbox_id AND s.id = d.id;
    END IF;
    IF cardinality(p_policies_removed) > 0 THEN
        DELETE FROM policies WHERE sandbox_id = ANY(p_policies_removed);
    END IF;
    IF cardinality(p_workspaces_removed) > 0 THEN
        DELETE FROM workspaces WHERE name = ANY(p_workspaces_removed);
    END IF;

    -- 3. Upserts, parents before children.
    IF cardinality(p_ws_name) > 0 THEN
        INSERT INTO workspaces (name, id, phase, resource_version, created_at_ms)
        SELECT * FROM unnest(p_ws_name, p_ws_id, p_ws_phase, p_ws_version, p_ws_created)
        ON CONFLICT (name) DO UPDATE
           SET id = EXCLUDED.id, phase = EXCLUDED.phase,
               resource_version = EXCLUDED.resource_version,
               created_at_ms = EXCLUDED.created_at_ms;
    END IF;
    IF cardinality(p_sb_id) > 0 THEN
        INSERT INTO sandboxes (id, workspace, name, phase, generation, labels, annotations,
                               spec, resource_version, created_at_ms, message, operation,
                               host_identity, restart_count)
        SELECT * FROM unnest(p_sb_id, p_sb_workspace, p_sb_name, p_sb_phase, p_sb_generation,
                             p_sb_labels, p_sb_annotations, p_sb_spec, p_sb_version,
                             p_sb_created, p_sb_message, p_sb_operation, p_sb_host_identity,
                             p_sb_restart_count)
        ON CONFLICT (id) DO UPDATE
           SET workspace = EXCLUDED.workspace, name = EXCLUDED.name,
               phase = EXCLUDED.phase, generation = EXCLUDED.generation,
               labels = EXCLUDED.labels, annotations = EXCLUDED.annotations,
               spec = EXCLUDED.spec, resource_version = EXCLUDED.resource_version,
               created_at_ms = EXCLUDED.created_at_ms, message = EXCLUDED.message,
               operation = EXCLUDED.operation, host_identity = EXCLUDED.host_identity,
               restart_count = EXCLUDED.restart_count;
        INSERT INTO executions (sandbox_id, generation, handle, driver, exit_code)
        SELECT * FROM unnest(p_sb_id, p_sb_generation, p_ex_handle, p_ex_driver, p_ex_exit_code)
        ON CONFLICT (sandbox_id) DO UPDATE
           SET generation = EXCLUDED.generation, handle = EXCLUDED.handle,
               driver = EXCLUDED.driver, exit_code = EXCLUDED.exit_code;
    END IF;
    IF cardinality(p_se_id) > 0 THEN
        INSERT INTO ssh_sessions (sandbox_id, id, created_at_ms, expires_at_ms)
        SELECT * FROM unnest(p_se_sandbox, p_se_id, p_se_created, p_se_expires)
        ON CONFLICT (sandbox_id, id) DO UPDATE
           SET created_at_ms = EXCLUDED.created_at_ms,
               expires_at_ms = EXCLUDED.expires_at_ms;
    END IF;
    IF cardinality(p_po_sandbox) > 0 THEN
        INSERT INTO policies (sandbox_id, version, document, updated_at_ms)
        SELECT * FROM unnest(p_po_sandbox, p_po_version, p_po_document, p_po_updated)
        ON CONFLICT (sandbox_id) DO UPDATE
           SET version = EXCLUDED.version, document = EXCLUDED.document,
               updated_at_ms = EXCLUDED.updated_at_ms;
    END IF;

    -- 4. The events: a plain INSERT (an index already there is a double
    --    apply, which the guard rules out; the primary key makes it an
    --    error rather than a silent duplicate).
    IF cardinality(p_ev_index) > 0 THEN
        INSERT INTO lifecycle_events (log_index, term, command, outcome, reason, message,
                                      workspace, sandbox_id, request_id, command_time_ms,
                                      response, caller, caller_role)
        SELECT * FROM unnest(p_ev_index, p_ev_term, p_ev_command, p_ev_outcome, p_ev_reason,
                             p_ev_message, p_ev_workspace, p_ev_sandbox, p_ev_request,
                             p_ev_time, p_ev_response, p_ev_caller, p_ev_caller_role);
    END IF;

    -- 5. The shadow state, when due.
    IF p_shadow IS NOT NULL THEN
        INSERT INTO projection_shadow (singleton, applied_index, applied_term, state)
        VALUES (TRUE, p_shadow_index, p_shadow_term, p_shadow)
        ON CONFLICT (singleton) DO UPDATE
           SET applied_index = EXCLUDED.applied_index,
               applied_term = EXCLUDED.applied_term,
               state = EXCLUDED.state;
    END IF;
END;
$$;
