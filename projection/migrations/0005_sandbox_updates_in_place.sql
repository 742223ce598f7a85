-- Sandbox rows updated in place (issue 18). Every lifecycle request
-- updates its sandbox's row twice (its begin and its completion), and
-- each changed `phase`, which the index sandboxes_phase covered: no such
-- update could be HOT (heap-only), so each left a dead row version in the
-- table and a new entry in every one of its four indexes until autovacuum
-- came by (at most once a minute). Under a steady 2,500 requests/s the
-- table of ~120 live sandboxes grew to ~370 pages between vacuums, and the
-- batch function's statements on it (the upsert, the delete of removed
-- sandboxes, a sequential scan in its cached plan) spent most of their
-- time checking the visibility of dead versions: ~1.2 of the batch's
-- ~2.1 ms (pg_stat_statements with track = all, palisade-bench-projection
-- at 5,000 entries/s).
--
-- Without the index no column an update changes is indexed (labels,
-- workspace and name are written unchanged), so updates are HOT and
-- PostgreSQL prunes the dead versions from the page as it reads it.
-- The price: ListSandboxes filtered by a phase few sandboxes are in walks
-- the (workspace, name) order until it has a page, where the phase index
-- found them directly. Measured on 100,000 sandboxes, a page of a phase
-- none is in: 0.27 ms with the index, 13 ms without (~130 ms at a million).
-- The write path pays on every lifecycle command; that listing is a
-- dashboard's occasional query.
-- The free space a page keeps (fillfactor) lets the new version stay on
-- the old one's page, which HOT needs. It applies to pages written from now
-- on.
DROP INDEX sandboxes_phase;
ALTER TABLE sandboxes SET (fillfactor = 50);
ALTER TABLE executions SET (fillfactor = 50);
