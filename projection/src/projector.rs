//! The projector: follows a replica's applied index, reads committed
//! entries from its log in batches, and writes each batch to PostgreSQL in
//! one guarded transaction.
//!
//! # Which replica projects
//!
//! The leader. The gateway passes a `watch::Receiver<bool>` that is true
//! while its replica leads; every other replica's projector stands by and
//! only watches the checkpoint (for `palisade cluster status` and
//! read-your-writes waits). The leader applies first, so it projects with
//! the least lag, and one writer means no wasted transactions. Correctness
//! does not rest on it: a deposed leader still finishing a batch, or two
//! projectors started by hand, are serialized by the checkpoint guard —
//! the second transaction finds the checkpoint moved, rolls back before it
//! wrote a row, and its projector reloads.
//!
//! # The shadow state
//!
//! To know each entry's outcome and the rows it changes, the projector
//! replays entries through the pure `palisade_lifecycle::apply` on its own
//! copy of the state (the private `changes` module). That copy must be the
//! state *at the checkpoint*, not the replica's current state, which may be
//! ahead. So the first batch, and then one every
//! [`SHADOW_INTERVAL_ENTRIES`] entries (more for a large shadow: see
//! [`entries_between_shadows`]), also stores the shadow
//! (`projection_shadow`: the state's JSON without the cluster secret and
//! the SSH token digests) in the same transaction as the checkpoint; a
//! projector that starts, takes over, or lost a race loads it and replays
//! the log from it, without writing, up to the checkpoint. A projector
//! that stood by keeps its shadow in memory and only replays what others
//! projected since.
//!
//! The stored shadow leaves out request receipts (tens of thousands a
//! minute under load, each kept a day) except the few that may expire
//! within [`SHADOW_RECEIPTS_HORIZON_MS`](crate::SHADOW_RECEIPTS_HORIZON_MS):
//! a projector that loads it takes the others from its replica's state
//! (those made at or before the shadow's index), which is exact while the
//! replica's clock is within that horizon of the shadow's — so a shadow is
//! also stored at least every [`SHADOW_INTERVAL_CLOCK_MS`] of replicated
//! time, and a projector further behind resyncs. So a stored shadow costs
//! the sandboxes, sessions and policies, not the receipts; and each stored
//! shadow replaces the previous row, whose dead tuples are vacuumed right
//! away (`VACUUM projection_shadow`) rather than left to autovacuum.
//!
//! # Durability
//!
//! A batch commits with `synchronous_commit = off` (the projector's own
//! pool opens its sessions so, which also saves the batch a round trip
//! to set it): PostgreSQL answers
//! the commit before its WAL reaches the disk (it flushes within
//! `wal_writer_delay`, 200 ms by default). In a 30-minute soak a durable
//! commit now and then waited over a second for a disk the replicas'
//! own fsyncs kept busy, and the projection lagged by as much. Nothing is
//! lost by not waiting: the projection is a function of the Raft log,
//! which keeps every entry. If PostgreSQL crashes, it comes back
//! consistent at an earlier commit (rows, events and checkpoint together,
//! one transaction), the next batch's checkpoint guard finds the
//! checkpoint moved back, and the projector reloads and projects those
//! entries again (or resyncs, if the log was compacted meanwhile). A
//! reader may see rows that such a crash takes back until they are
//! projected again. The chaos harness's `postgres` nemesis stops the
//! server without a checkpoint (`pg_ctl stop -m immediate`) and checks
//! that the projection equals the state afterwards.
//!
//! # Failures
//!
//! PostgreSQL is not on the write path: the projector reads the log, which
//! Raft keeps regardless. Any failure (PostgreSQL down, slow — every
//! transaction is bounded by [`TRANSACTION_TIMEOUT`] —, a lost race) drops
//! the in-memory shadow (it may hold an uncommitted batch) and retries with
//! jittered exponential backoff, from the checkpoint. If the log was
//! compacted past the checkpoint meanwhile, the projector resyncs: it
//! replaces every projected row with the replica's current state (read
//! together with its applied log id) in one transaction, and records the
//! gap of events in `projection_resyncs`.

use std::cmp::min;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::watch;
use tracing::{Instrument, debug, info, warn};

use crate::changes::{BatchChanges, SHADOW_INTERVAL_CLOCK_MS, Shadow, WritePlan};
use crate::error::ProjectionError;
use crate::query::Projection;
use crate::source::{LogRecord, ReplicaSource};
use crate::status::{LagSamples, ProjectionStatus, ProjectorState};
use crate::store::{self, StageHook};
use palisade_raft::receipt_store::ReceiptFiles;

/// Most log entries one batch transaction projects.
pub const BATCH_ENTRIES_MAX: usize = 512;
/// The shadow state is stored every this many entries, or less often for
/// a large one (see [`entries_between_shadows`]).
pub const SHADOW_INTERVAL_ENTRIES: u64 = 1_000;
/// Bytes of stored shadow a projected entry may cost: a shadow of `n`
/// bytes is stored at most every `n / SHADOW_BYTES_PER_ENTRY` entries.
pub const SHADOW_BYTES_PER_ENTRY: u64 = 1024;

/// Entries to project between two stored shadows, with
/// `interval_entries` configured and the last stored shadow of
/// `shadow_bytes`: the interval, or more for a large shadow, so that
/// storing shadows costs at most [`SHADOW_BYTES_PER_ENTRY`] per entry
/// (encoding and writing a shadow is O(state): at a fixed interval a state
/// of a million sandboxes, whose snapshot is ~650 MiB, had hundreds of
/// megabytes of shadow encoded and written every thousand entries). The
/// price is the replay of a projector that starts or takes over: up to
/// that many entries from the stored shadow to the checkpoint
/// (`shadow_bytes / 1 KiB`: ~650,000 for that state, about five seconds
/// of the pure apply at the ~8 us an entry it takes under load). The
/// clock bound ([`SHADOW_INTERVAL_CLOCK_MS`]) holds regardless.
pub fn entries_between_shadows(interval_entries: u64, shadow_bytes: u64) -> u64 {
    interval_entries
        .max(shadow_bytes / SHADOW_BYTES_PER_ENTRY)
        .max(1)
}
/// Log entries whose `lifecycle_events` rows are kept, unless configured:
/// rows of older entries are deleted as the projection advances, so the
/// table stays bounded (~0.5 KB a row: about 0.5 GB) at any write rate.
pub const EVENTS_KEPT_ENTRIES_DEFAULT: u64 = 1_000_000;
/// Entries projected between two prunings of `lifecycle_events` (each
/// deletes the rows that fell out of the kept window since the last).
pub const EVENTS_PRUNE_INTERVAL_ENTRIES: u64 = 1_000;
/// Rows the projection deletes (sandboxes with what they own, sessions,
/// policies, workspaces; see `WritePlan::rows_removed`) between two
/// vacuums by the projector, at least (see [`vacuum_due`]).
pub const VACUUM_REMOVED_ROWS_MIN: u64 = 1_000;
/// ... and at least this fraction of the live sandboxes (1 / this).
pub const VACUUM_LIVE_SANDBOXES_DIVISOR: u64 = 5;

/// Whether the projector vacuums the tables it deletes rows from, with
/// `removed` rows deleted since it last did, `live` sandboxes projected and
/// `removed_min` configured ([`VACUUM_REMOVED_ROWS_MIN`]).
///
/// Why the projector and not only autovacuum: sandboxes are created and
/// deleted all the time, a deleted row's space and index entries are
/// reclaimed only by a vacuum, and autovacuum visits a database at most
/// once a minute (`autovacuum_naptime`): under a steady 2,500 requests/s a
/// table of ~100 live sandboxes grew to ~800-2,000 pages between visits,
/// and listings walked the dead entries of its (workspace, name) index.
/// Vacuuming after a fifth of the live rows (or 1,000, for a small table)
/// were deleted keeps the dead rows a bounded share of the table at any
/// rate, and costs per deleted row what autovacuum's scale factor does.
pub fn vacuum_due(removed: u64, live: u64, removed_min: u64) -> bool {
    removed > 0 && removed >= removed_min.max(live / VACUUM_LIVE_SANDBOXES_DIVISOR)
}
/// Bound on one transaction (batch, resync) or read, end to end.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);
/// First retry delay after a failure; doubles per consecutive failure.
pub const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest retry delay.
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Pause before reloading after losing the checkpoint race.
pub const CONFLICT_RETRY_DELAY: Duration = Duration::from_millis(10);
/// How often a standing-by projector reads the checkpoint, besides
/// following it through [`CHECKPOINT_CHANNEL`](crate::store::CHECKPOINT_CHANNEL)
/// notifications (the read catches what a notification cannot tell: a
/// checkpoint a PostgreSQL crash took back, notifications lost with a
/// connection).
pub const STANDBY_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long a projector waits for its replica to apply up to a checkpoint
/// that another projector wrote, before it retries.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(10);
/// Connections the projector's own pool opens at most: its batch and
/// resync transactions and checkpoint reads, one at a time, a vacuum
/// running beside them (see [`Projector::vacuum_if_due`]), and one of
/// slack for a connection being replaced.
pub const PROJECTOR_CONNECTIONS_MAX: u32 = 3;
/// Connections the readers' pool opens at most: `ListSandboxes` served from
/// the projection, read-your-writes waits, status reads. A pool of its own,
/// so slow or many readers wait for each other, never for the projector
/// (or it for them).
pub const READER_CONNECTIONS_MAX: u32 = 8;
/// How long acquiring a connection may take (PostgreSQL down: fail fast
/// and retry).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Server-side bound on one statement.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a projecting replica logs its status.
pub const STATUS_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// What woke a standing-by projector.
enum Woken {
    /// The leadership channel changed (false: it closed).
    Leadership(bool),
    /// A checkpoint notification, or the listening connection's failure.
    Notified(Result<sqlx::postgres::PgNotification, sqlx::Error>),
    /// Time to read the checkpoint.
    Poll,
}

/// How to reach PostgreSQL and tune the projector.
#[derive(Debug, Clone)]
pub struct ProjectionConfig {
    /// `postgres://user:password@host:port/database`.
    pub database_url: String,
    /// This replica's node id (recorded as `projected_by`).
    pub node_id: u64,
    /// Entries per batch transaction (1..=[`BATCH_ENTRIES_MAX`]).
    pub batch_entries_max: usize,
    /// Entries between stored shadows (more for a large shadow: see
    /// [`entries_between_shadows`]).
    pub shadow_interval_entries: u64,
    /// Seed of the retry jitter.
    pub seed: u64,
    /// Retention of `lifecycle_events`: only the rows of the last this
    /// many log entries are kept (`--projection-events-kept-entries`).
    pub events_kept_entries: u64,
    /// Where the shadow state keeps its request receipts: a directory for
    /// tables on disk (the replica's data directory), so the projector's
    /// memory does not grow with them, like the replica's; `None` keeps
    /// them in memory (tests).
    pub receipts_dir: Option<std::path::PathBuf>,
    /// How often a standing-by projector reads the checkpoint
    /// ([`STANDBY_POLL_INTERVAL`]).
    pub standby_poll_interval: Duration,
    /// Rows deleted between two vacuums by the projector, at least
    /// ([`VACUUM_REMOVED_ROWS_MIN`]; see [`vacuum_due`]).
    pub vacuum_removed_rows_min: u64,
}

impl ProjectionConfig {
    /// Defaults for `database_url` and `node_id`.
    pub fn new(database_url: impl Into<String>, node_id: u64) -> Self {
        Self {
            database_url: database_url.into(),
            node_id,
            batch_entries_max: BATCH_ENTRIES_MAX,
            shadow_interval_entries: SHADOW_INTERVAL_ENTRIES,
            seed: node_id,
            events_kept_entries: EVENTS_KEPT_ENTRIES_DEFAULT,
            receipts_dir: None,
            standby_poll_interval: STANDBY_POLL_INTERVAL,
            vacuum_removed_rows_min: VACUUM_REMOVED_ROWS_MIN,
        }
    }
}

/// A lazily connecting pool of at most `connections_max` connections,
/// named `application_name` in `pg_stat_activity`: creating it never waits
/// for PostgreSQL, so a replica starts (and takes writes) while the
/// database is down.
pub fn connect_lazy(
    database_url: &str,
    connections_max: u32,
    application_name: &str,
) -> Result<PgPool, ProjectionError> {
    connect_lazy_with(database_url, connections_max, application_name, &[])
}

/// [`connect_lazy`], every session also started with these settings.
fn connect_lazy_with(
    database_url: &str,
    connections_max: u32,
    application_name: &str,
    settings: &[(&str, &str)],
) -> Result<PgPool, ProjectionError> {
    let statement_timeout = format!("{}ms", STATEMENT_TIMEOUT.as_millis());
    let options = PgConnectOptions::from_str(database_url)?
        .application_name(application_name)
        .options(
            [("statement_timeout", statement_timeout.as_str())]
                .into_iter()
                .chain(settings.iter().copied()),
        );
    Ok(PgPoolOptions::new()
        .max_connections(connections_max)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_lazy_with(options))
}

/// Runs `future` under [`TRANSACTION_TIMEOUT`]. When it expires the future
/// is dropped, which rolls its transaction back.
async fn bounded<T>(
    future: impl Future<Output = Result<T, ProjectionError>>,
) -> Result<T, ProjectionError> {
    tokio::time::timeout(TRANSACTION_TIMEOUT, future)
        .await
        .map_err(|_| ProjectionError::Timeout(TRANSACTION_TIMEOUT))?
}

/// Starts a projector task for `source` and returns the handle to query it.
/// The task runs until `shutdown` resolves; it projects while `active` is
/// true (see the module doc: the gateway makes it "this replica leads").
pub fn spawn<S: ReplicaSource>(
    config: ProjectionConfig,
    source: S,
    active: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(Projection, tokio::task::JoinHandle<()>), ProjectionError> {
    let (projector, projection) = Projector::new(config, source)?;
    let task = tokio::spawn(projector.run(active, shutdown));
    Ok((projection, task))
}

/// The projector of one replica. See the module documentation.
pub struct Projector<S: ReplicaSource> {
    config: ProjectionConfig,
    pool: PgPool,
    source: S,
    applied: watch::Receiver<u64>,
    status: watch::Sender<ProjectionStatus>,
    lag: Arc<LagSamples>,
    hook: Option<StageHook>,
    /// The state at `shadow.position`; `None` when unknown (start, after a
    /// failure).
    shadow: Option<Shadow>,
    /// True while `shadow` is known to be at the checkpoint (or behind it
    /// only by what this projector wrote itself).
    verified: bool,
    /// Index of the shadow last stored in PostgreSQL (`None`: none is
    /// stored, so the next batch stores one — a checkpoint above 0 always
    /// has a stored shadow at or below it).
    shadow_stored_at: Option<u64>,
    /// The replicated clock of the shadow last stored (or loaded).
    shadow_stored_clock_ms: i64,
    /// Size of the shadow last stored (or loaded), which spaces the next
    /// one (see [`entries_between_shadows`]).
    shadow_stored_bytes: u64,
    /// `lifecycle_events` rows at or below this index were deleted by this
    /// projector (`None`: not yet, the first pruning has no lower bound).
    events_pruned_through: Option<u64>,
    /// Rows deleted since the projector last vacuumed (see [`vacuum_due`]).
    removed_since_vacuum: u64,
    /// The vacuum started last, if any (see [`Projector::vacuum_if_due`]).
    vacuum: Option<tokio::task::JoinHandle<()>>,
    migrated: bool,
    rng: StdRng,
    last_status_log: Instant,
    /// The shadow's receipt tables (opened at first use, from
    /// `config.receipts_dir`).
    receipt_files: Option<ReceiptFiles>,
}

impl<S: ReplicaSource> Projector<S> {
    /// Retention of `lifecycle_events`: once the projection reached
    /// `projected`, deletes the rows of entries at or below `projected -
    /// events_kept_entries`, every [`EVENTS_PRUNE_INTERVAL_ENTRIES`]. Each
    /// pruning walks the primary key from where the last one stopped, so it
    /// costs O(rows deleted). A failure is logged and the next pruning
    /// catches up; it never holds up projecting.
    async fn prune_events(&mut self, projected: u64) {
        let Some(through) = projected
            .checked_sub(self.config.events_kept_entries)
            .filter(|through| *through > 0)
        else {
            return;
        };
        if self
            .events_pruned_through
            .is_some_and(|pruned| through < pruned + EVENTS_PRUNE_INTERVAL_ENTRIES)
        {
            return;
        }
        match bounded(store::prune_events(
            &self.pool,
            self.events_pruned_through,
            through,
        ))
        .await
        {
            Ok(deleted) => {
                debug!(
                    node = self.config.node_id,
                    through, deleted, "lifecycle_events pruned"
                );
                self.events_pruned_through = Some(through);
            }
            Err(error) => {
                warn!(node = self.config.node_id, %error, "pruning lifecycle_events failed; the next batch retries");
            }
        }
    }

    /// Starts a vacuum of the tables the projection deletes rows from when
    /// [`vacuum_due`] and none is running; a failure is logged and left to
    /// autovacuum.
    ///
    /// In a task of its own, on a connection of the projector's pool: a vacuum
    /// takes as long as the tables' changed pages and indexes (seconds for
    /// a million sandboxes), and the batches go on meanwhile.
    fn vacuum_if_due(&mut self, live_sandboxes: u64) {
        if !vacuum_due(
            self.removed_since_vacuum,
            live_sandboxes,
            self.config.vacuum_removed_rows_min,
        ) || self.vacuum.as_ref().is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let removed = std::mem::take(&mut self.removed_since_vacuum);
        let (pool, node) = (self.pool.clone(), self.config.node_id);
        self.vacuum = Some(tokio::spawn(async move {
            let started = Instant::now();
            match bounded(store::vacuum_removals(&pool)).await {
                Ok(()) => debug!(
                    node,
                    removed,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "vacuumed the tables rows were deleted from"
                ),
                Err(error) => {
                    warn!(node, %error, "vacuuming the projection's tables failed; autovacuum will");
                }
            }
        }));
    }

    /// A projector for `source` writing to `config.database_url` (connected
    /// lazily), and the handle to query the projection.
    /// The projector writes through a pool of its own
    /// ([`PROJECTOR_CONNECTIONS_MAX`]) and the handle reads through another
    /// ([`READER_CONNECTIONS_MAX`]).
    pub fn new(config: ProjectionConfig, source: S) -> Result<(Self, Projection), ProjectionError> {
        // "Durability" in the module doc: why the projector's commits do
        // not wait for PostgreSQL's disk.
        let writer = connect_lazy_with(
            &config.database_url,
            PROJECTOR_CONNECTIONS_MAX,
            "palisade-projector",
            &[("synchronous_commit", "off")],
        )?;
        let readers = connect_lazy(
            &config.database_url,
            READER_CONNECTIONS_MAX,
            "palisade-projection-reader",
        )?;
        Ok(Self::with_pools(config, writer, readers, source))
    }

    /// Like [`Projector::new`], on existing pools: `pool` for the projector,
    /// `readers` for the [`Projection`] handle.
    pub fn with_pools(
        config: ProjectionConfig,
        pool: PgPool,
        readers: PgPool,
        source: S,
    ) -> (Self, Projection) {
        assert!(
            (1..=BATCH_ENTRIES_MAX).contains(&config.batch_entries_max),
            "batch_entries_max must be within 1..={BATCH_ENTRIES_MAX}"
        );
        let applied = source.applied_index();
        let (status, status_receiver) = watch::channel(ProjectionStatus {
            node_id: config.node_id,
            ..ProjectionStatus::default()
        });
        let lag = Arc::new(LagSamples::default());
        let projection = Projection::new(readers, status_receiver, applied.clone(), lag.clone());
        let rng = StdRng::seed_from_u64(config.seed);
        let projector = Projector {
            config,
            pool,
            source,
            applied,
            status,
            lag,
            hook: None,
            shadow: None,
            verified: false,
            shadow_stored_at: None,
            events_pruned_through: None,
            removed_since_vacuum: 0,
            vacuum: None,
            shadow_stored_clock_ms: 0,
            shadow_stored_bytes: 0,
            migrated: false,
            rng,
            last_status_log: Instant::now(),
            receipt_files: None,
        };
        (projector, projection)
    }

    /// Calls `hook` at each [`BatchStage`](crate::BatchStage) of every batch
    /// transaction (fault injection for tests and the chaos harness).
    pub fn with_stage_hook(mut self, hook: StageHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Runs until `shutdown` resolves or the replica's applied-index
    /// channel closes. Dropping the future mid-batch (shutdown, abort)
    /// rolls the open transaction back; the next projector resumes from
    /// the checkpoint.
    pub async fn run(
        mut self,
        mut active: watch::Receiver<bool>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let span = tracing::info_span!("projector", node = self.config.node_id);
        let tracking = track_applied(self.applied.clone(), self.lag.clone());
        async {
            tokio::select! {
                () = shutdown => info!("projector stopped"),
                () = tracking => info!("replica stopped; projector stops"),
                () = self.main_loop(&mut active) => {}
            }
        }
        .instrument(span)
        .await;
    }

    async fn main_loop(&mut self, active: &mut watch::Receiver<bool>) {
        let mut consecutive_failures = 0u32;
        loop {
            if !*active.borrow_and_update() {
                if !self.standby(active).await {
                    info!(
                        node = self.config.node_id,
                        "leadership channel closed; projector stops"
                    );
                    return;
                }
                continue;
            }
            match self.step(active).await {
                Ok(()) => consecutive_failures = 0,
                Err(ProjectionError::CheckpointMoved { expected }) => {
                    // Lost a race: reload from the new checkpoint (the
                    // winner made progress, so this cannot spin for long).
                    tokio::time::sleep(CONFLICT_RETRY_DELAY).await;
                    self.shadow = None;
                    self.verified = false;
                    self.status.send_modify(|status| status.conflicts += 1);
                    info!(
                        node = self.config.node_id,
                        expected, "another projector moved the checkpoint; reloading"
                    );
                }
                Err(error) => {
                    consecutive_failures = consecutive_failures.saturating_add(1);
                    self.shadow = None;
                    self.verified = false;
                    let delay = self.backoff(consecutive_failures, error.is_transient());
                    warn!(
                        node = self.config.node_id,
                        %error,
                        retry_in_ms = delay.as_millis() as u64,
                        "projection failed; retrying"
                    );
                    self.status.send_modify(|status| {
                        status.state = ProjectorState::Retrying;
                        status.failures += 1;
                        status.last_error = Some(error.to_string());
                    });
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = active.changed() => {}
                    }
                }
            }
        }
    }

    /// Jittered exponential backoff; errors an operator must fix wait the
    /// longest.
    fn backoff(&mut self, failures: u32, transient: bool) -> Duration {
        let base = if transient {
            let exponent = failures.saturating_sub(1).min(16);
            min(
                RETRY_BACKOFF_MIN.saturating_mul(1u32 << exponent),
                RETRY_BACKOFF_MAX,
            )
        } else {
            RETRY_BACKOFF_MAX
        };
        let jitter = self.rng.random_range(0.5..1.0);
        base.mul_f64(jitter)
    }

    /// Not leading: keep the shadow, follow the checkpoint (notified by
    /// the projecting replica's commits, and read every
    /// `standby_poll_interval`). Returns false when the leadership channel
    /// closed.
    async fn standby(&mut self, active: &mut watch::Receiver<bool>) -> bool {
        self.verified = false;
        self.status
            .send_modify(|status| status.state = ProjectorState::Standby);
        let mut listener = None;
        loop {
            // Listen first, then read: no commit falls between the two.
            if listener.is_none() {
                match bounded(store::listen_checkpoints(&self.pool)).await {
                    Ok(listening) => listener = Some(listening),
                    Err(error) => {
                        debug!(%error, "cannot listen for checkpoints; reading them every {:?}", self.config.standby_poll_interval);
                    }
                }
            }
            match bounded(store::read_checkpoint(&self.pool)).await {
                Ok(checkpoint) => self.standby_saw(checkpoint.position),
                Err(error) => {
                    debug!(%error, "cannot read the projection checkpoint");
                    self.status
                        .send_modify(|status| status.last_error = Some(error.to_string()));
                }
            }
            let poll = tokio::time::sleep(self.config.standby_poll_interval);
            tokio::pin!(poll);
            loop {
                let notified = async {
                    match listener.as_mut() {
                        Some(listening) => listening.recv().await,
                        None => std::future::pending().await,
                    }
                };
                let woken = tokio::select! {
                    changed = active.changed() => Woken::Leadership(changed.is_ok()),
                    notification = notified => Woken::Notified(notification),
                    () = &mut poll => Woken::Poll,
                };
                match woken {
                    Woken::Leadership(false) => return false,
                    Woken::Leadership(true) if *active.borrow_and_update() => return true,
                    Woken::Leadership(true) => {}
                    Woken::Notified(Ok(notification)) => {
                        if let Some(position) = store::checkpoint_notified(notification.payload()) {
                            self.standby_saw(position);
                        }
                    }
                    Woken::Notified(Err(error)) => {
                        // Notifications may have been lost with the
                        // connection: listen again and read.
                        debug!(%error, "lost the checkpoint notifications");
                        listener = None;
                        break;
                    }
                    Woken::Poll => break,
                }
            }
        }
    }

    /// A standing-by projector learned the checkpoint.
    fn standby_saw(&mut self, position: palisade_lifecycle::LogPosition) {
        self.lag.forget_through(position.index);
        self.status.send_modify(|status| {
            status.projected_index = position.index;
            status.projected_term = position.term;
            status.last_error = None;
        });
    }

    /// One unit of work: prepare if needed, then one batch (or wait for
    /// the replica to apply more).
    async fn step(&mut self, active: &mut watch::Receiver<bool>) -> Result<(), ProjectionError> {
        if !self.migrated {
            bounded(store::migrate(&self.pool)).await?;
            self.migrated = true;
        }
        if !self.verified || self.shadow.is_none() {
            self.prepare().await?;
        }
        let from = self
            .shadow
            .as_ref()
            .map_or(0, |shadow| shadow.position.index);
        let applied = *self.applied.borrow_and_update();
        if applied <= from {
            self.status.send_modify(|status| {
                status.state = ProjectorState::Projecting;
                status.last_error = None;
            });
            self.log_status();
            tokio::select! {
                changed = self.applied.changed() => {
                    if changed.is_err() {
                        return Err(ProjectionError::Log("the replica stopped".into()));
                    }
                }
                _ = active.changed() => {}
            }
            return Ok(());
        }
        let end = min(applied, from + self.config.batch_entries_max as u64);
        match bounded(self.source.read_committed(from + 1, end)).await {
            Ok(records) => self.project_batch(&records).await,
            Err(ProjectionError::Compacted {
                index,
                first_available,
            }) => {
                warn!(
                    node = self.config.node_id,
                    index,
                    ?first_available,
                    "the log was compacted past the projection's checkpoint; resyncing from the state"
                );
                self.resync(from).await
            }
            Err(error) => Err(error),
        }
    }

    /// Applies `records` to the shadow and writes the batch.
    async fn project_batch(&mut self, records: &[LogRecord]) -> Result<(), ProjectionError> {
        // Taken out: if the transaction fails (or this future is dropped)
        // the shadow holds an uncommitted batch and must not be reused.
        let Some(mut shadow) = self.shadow.take() else {
            return Err(ProjectionError::Inconsistent(
                "no shadow state to project from".into(),
            ));
        };
        let from = shadow.position.index;
        let mut changes = BatchChanges::default();
        if from == 0 {
            // The initial state's rows (the `default` workspace) come from
            // no entry: the first batch writes them.
            changes
                .workspaces
                .extend(shadow.state.workspaces.keys().cloned());
        }
        for record in records {
            shadow.apply(record, Some(&mut changes));
        }
        shadow
            .state
            .receipts
            .end_batch()
            .map_err(ProjectionError::ShadowReceipts)?;
        let to = shadow.position;
        let plan = WritePlan::of_changes(&shadow.state, changes);
        // Every `shadow_interval_entries` (more for a large shadow), and
        // at least every SHADOW_INTERVAL_CLOCK_MS of replicated time: a
        // stored shadow is usable only while the replica's clock is within
        // the receipts horizon of it (see `Shadow::restore_receipts`).
        let between = entries_between_shadows(
            self.config.shadow_interval_entries,
            self.shadow_stored_bytes,
        );
        let shadow_bytes = if self.shadow_stored_at.is_none_or(|stored| {
            to.index >= stored + between
                || shadow
                    .state
                    .clock_ms
                    .saturating_sub(self.shadow_stored_clock_ms)
                    >= SHADOW_INTERVAL_CLOCK_MS
        }) {
            Some(shadow.encode().map_err(|source| ProjectionError::Decode {
                what: "the shadow state",
                source,
            })?)
        } else {
            None
        };
        let cluster_id = shadow
            .state
            .cluster
            .as_ref()
            .map(|cluster| cluster.cluster_id.clone());
        let started = Instant::now();
        let written = bounded(store::write_batch(
            &self.pool,
            self.config.node_id,
            from,
            to,
            cluster_id.as_deref(),
            &plan,
            shadow_bytes.as_deref().map(|bytes| (to, bytes)),
            self.hook.as_ref(),
        ))
        .await?;
        let elapsed = started.elapsed();
        if let Some(bytes) = &shadow_bytes {
            self.shadow_stored_at = Some(to.index);
            self.shadow_stored_clock_ms = shadow.state.clock_ms;
            self.shadow_stored_bytes = bytes.len() as u64;
            // The replaced shadow's row (and its TOAST chunks) are dead
            // tuples: reclaim them now rather than leave the table's size
            // to autovacuum.
            if let Err(error) = bounded(store::vacuum_shadow(&self.pool)).await {
                debug!(node = self.config.node_id, %error, "vacuuming projection_shadow failed; autovacuum will");
            }
        }
        self.prune_events(to.index).await;
        self.removed_since_vacuum += plan.rows_removed();
        self.vacuum_if_due(shadow.state.sandboxes.len() as u64);
        self.shadow = Some(shadow);
        self.lag.forget_through(to.index);
        self.status.send_modify(|status| {
            status.state = ProjectorState::Projecting;
            status.projected_index = to.index;
            status.projected_term = to.term;
            status.batches += 1;
            status.events += written.events as u64;
            status.last_batch_entries = records.len() as u64;
            status.last_batch_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
            status.last_error = None;
        });
        debug!(
            node = self.config.node_id,
            from = from + 1,
            to = to.index,
            events = written.events,
            elapsed_ms = elapsed.as_millis() as u64,
            "projected a batch"
        );
        self.log_status();
        Ok(())
    }

    fn log_status(&mut self) {
        if self.last_status_log.elapsed() < STATUS_LOG_INTERVAL {
            return;
        }
        self.last_status_log = Instant::now();
        let status = self.status.borrow().clone();
        let applied = *self.applied.borrow();
        info!(
            node = status.node_id,
            projected_index = status.projected_index,
            applied_index = applied,
            lag_entries = applied.saturating_sub(status.projected_index),
            lag_ms = self.lag.lag_ms(status.projected_index, Instant::now()),
            batches = status.batches,
            conflicts = status.conflicts,
            resyncs = status.resyncs,
            failures = status.failures,
            "projection status"
        );
    }

    /// Brings the shadow to the checkpoint: the one kept in memory, else
    /// the stored one, replayed (without writing) up to the checkpoint; or
    /// resyncs when the log no longer holds what the replay needs.
    async fn prepare(&mut self) -> Result<(), ProjectionError> {
        self.status
            .send_modify(|status| status.state = ProjectorState::Preparing);
        let checkpoint = bounded(store::read_checkpoint(&self.pool)).await?;
        let target = checkpoint.position;
        self.status.send_modify(|status| {
            status.projected_index = target.index;
            status.projected_term = target.term;
        });
        self.wait_applied(target.index).await?;
        let kept = self
            .shadow
            .take()
            .filter(|shadow| shadow.position.index <= target.index);
        let mut shadow = match kept {
            Some(shadow) => shadow,
            None => match bounded(store::read_shadow(&self.pool)).await? {
                Some((position, state, stored_bytes)) if position.index <= target.index => {
                    self.shadow_stored_at = Some(position.index);
                    self.shadow_stored_clock_ms = state.clock_ms;
                    self.shadow_stored_bytes = stored_bytes;
                    let mut shadow = Shadow { state, position };
                    self.receipts_on_disk(&mut shadow)?;
                    // The stored shadow holds only the receipts that may
                    // expire soon; the others come from the replica.
                    let (replica, _) = self.source.applied_state();
                    if !shadow
                        .restore_receipts(&replica)
                        .map_err(ProjectionError::ShadowReceipts)?
                    {
                        warn!(
                            node = self.config.node_id,
                            shadow = position.index,
                            checkpoint = target.index,
                            "the stored shadow is too far behind the replica's clock to restore its receipts; resyncing"
                        );
                        return self.resync(target.index).await;
                    }
                    shadow
                }
                Some(_) => {
                    // The shadow only moves with the checkpoint: another
                    // projector committed since we read it. Start over.
                    return Err(ProjectionError::CheckpointMoved {
                        expected: target.index,
                    });
                }
                None if target.index == 0 => {
                    self.shadow_stored_at = None;
                    let mut shadow = Shadow::initial();
                    self.receipts_on_disk(&mut shadow)?;
                    shadow
                }
                None => {
                    warn!(
                        node = self.config.node_id,
                        checkpoint = target.index,
                        "the projection has a checkpoint but no stored shadow; resyncing"
                    );
                    return self.resync(target.index).await;
                }
            },
        };
        while shadow.position.index < target.index {
            let start = shadow.position.index + 1;
            let end = min(
                target.index,
                start + self.config.batch_entries_max as u64 - 1,
            );
            match bounded(self.source.read_committed(start, end)).await {
                Ok(records) => {
                    for record in &records {
                        shadow.apply(record, None);
                    }
                    shadow
                        .state
                        .receipts
                        .end_batch()
                        .map_err(ProjectionError::ShadowReceipts)?;
                }
                Err(ProjectionError::Compacted { .. }) => {
                    warn!(
                        node = self.config.node_id,
                        needed = start,
                        checkpoint = target.index,
                        "the log no longer holds the entries between the stored shadow and the checkpoint; resyncing"
                    );
                    return self.resync(target.index).await;
                }
                Err(error) => return Err(error),
            }
        }
        if shadow.position != target && target.index > 0 {
            return Err(ProjectionError::ForeignDatabase {
                detail: format!(
                    "its checkpoint is entry {} of term {}, but this replica's entry {} is of term {}",
                    target.index, target.term, shadow.position.index, shadow.position.term
                ),
            });
        }
        if let (Some(projected), Some(ours)) = (&checkpoint.cluster_id, &shadow.state.cluster)
            && *projected != ours.cluster_id
        {
            return Err(ProjectionError::ForeignDatabase {
                detail: format!(
                    "it was projected from cluster {projected}, this is cluster {}",
                    ours.cluster_id
                ),
            });
        }
        self.shadow = Some(shadow);
        self.verified = true;
        self.lag.forget_through(target.index);
        info!(
            node = self.config.node_id,
            checkpoint = target.index,
            "projector ready"
        );
        Ok(())
    }

    /// Moves `shadow`'s receipts into a table on disk of their own, when
    /// the projector keeps them there (`config.receipts_dir`): O(receipts),
    /// once per shadow taken from PostgreSQL or from the replica.
    fn receipts_on_disk(&mut self, shadow: &mut Shadow) -> Result<(), ProjectionError> {
        let Some(dir) = self.config.receipts_dir.clone() else {
            return Ok(());
        };
        let failed = |error: std::io::Error| {
            ProjectionError::ShadowReceipts(format!("in {}: {error}", dir.display()))
        };
        if self.receipt_files.is_none() {
            self.receipt_files = Some(ReceiptFiles::open(&dir).map_err(failed)?);
        }
        let store = self
            .receipt_files
            .as_mut()
            .expect("opened above")
            .create()
            .map_err(failed)?;
        shadow
            .state
            .receipts
            .move_into(Box::new(store))
            .map_err(ProjectionError::ShadowReceipts)
    }

    /// Waits (bounded) until this replica applied `index`.
    async fn wait_applied(&mut self, index: u64) -> Result<(), ProjectionError> {
        let waited = tokio::time::timeout(
            CATCH_UP_WAIT,
            self.applied.wait_for(|applied| *applied >= index),
        )
        .await;
        match waited {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ProjectionError::Log("the replica stopped".into())),
            Err(_) => Err(ProjectionError::Log(format!(
                "this replica has not applied up to the projection's checkpoint {index} within {CATCH_UP_WAIT:?}"
            ))),
        }
    }

    /// Replaces the projection with the replica's current state, in one
    /// transaction guarded on the checkpoint `from`.
    async fn resync(&mut self, from: u64) -> Result<(), ProjectionError> {
        self.status
            .send_modify(|status| status.state = ProjectorState::Resyncing);
        self.shadow = None;
        self.verified = false;
        let (state, position) = self.source.applied_state();
        if position.index < from {
            return Err(ProjectionError::Log(format!(
                "cannot resync: this replica's state is at {}, behind the checkpoint {from}",
                position.index
            )));
        }
        let mut shadow = Shadow { state, position };
        self.receipts_on_disk(&mut shadow)?;
        if position.index == from {
            // Already there: the state at the checkpoint is the shadow.
            self.shadow = Some(shadow);
            self.verified = true;
            return Ok(());
        }
        let bytes = shadow.encode().map_err(|source| ProjectionError::Decode {
            what: "the shadow state",
            source,
        })?;
        bounded(store::write_resync(
            &self.pool,
            self.config.node_id,
            from,
            position,
            &shadow.state,
            &bytes,
        ))
        .await?;
        warn!(
            node = self.config.node_id,
            from,
            to = position.index,
            "projection resynced from the replica's state; the events of the entries in between are not in lifecycle_events (see projection_resyncs)"
        );
        self.shadow_stored_clock_ms = shadow.state.clock_ms;
        self.shadow_stored_bytes = bytes.len() as u64;
        self.shadow = Some(shadow);
        self.verified = true;
        self.shadow_stored_at = Some(position.index);
        self.lag.forget_through(position.index);
        self.status.send_modify(|status| {
            status.state = ProjectorState::Projecting;
            status.projected_index = position.index;
            status.projected_term = position.term;
            status.resyncs += 1;
            status.last_error = None;
        });
        Ok(())
    }
}

/// Records when each applied index was first seen, until the replica's
/// channel closes.
async fn track_applied(mut applied: watch::Receiver<u64>, lag: Arc<LagSamples>) {
    lag.record(*applied.borrow_and_update(), Instant::now());
    while applied.changed().await.is_ok() {
        let index = *applied.borrow_and_update();
        lag.record(index, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_table_is_vacuumed_after_the_minimum_of_deletions() {
        assert!(!vacuum_due(0, 0, VACUUM_REMOVED_ROWS_MIN));
        assert!(!vacuum_due(999, 100, VACUUM_REMOVED_ROWS_MIN));
        assert!(vacuum_due(1_000, 100, VACUUM_REMOVED_ROWS_MIN));
    }

    #[test]
    fn a_large_table_is_vacuumed_after_a_fifth_of_its_rows() {
        assert!(!vacuum_due(199_999, 1_000_000, VACUUM_REMOVED_ROWS_MIN));
        assert!(vacuum_due(200_000, 1_000_000, VACUUM_REMOVED_ROWS_MIN));
    }

    #[test]
    fn nothing_deleted_is_never_due() {
        assert!(!vacuum_due(0, 0, 0));
        assert!(vacuum_due(1, 0, 0));
    }
}
