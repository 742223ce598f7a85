//! Every bound Palisade enforces, in one place and named for what it limits.
//!
//! The API edge checks these and answers INVALID_ARGUMENT; `apply` checks the
//! ones that protect the replicated state again, so a buggy proposer cannot
//! grow the state without bound.
//!
//! Names carry their unit: `_BYTES_MAX` counts UTF-8 bytes, `_CHARS_MAX`
//! characters, `_COUNT_MAX` items; `_LENGTH_MAX` on a name or id counts
//! bytes of ASCII (the only characters those may hold).

/// Longest sandbox or workspace name (a DNS-1123 label).
pub const NAME_LENGTH_MAX: usize = 63;
/// Most labels (or annotations) on one object.
pub const LABELS_COUNT_MAX: usize = 64;
/// Longest label or annotation key.
pub const LABEL_KEY_LENGTH_MAX: usize = 253;
/// Longest label value.
pub const LABEL_VALUE_LENGTH_MAX: usize = 253;
/// Longest annotation value.
pub const ANNOTATION_VALUE_LENGTH_MAX: usize = 16 * 1024;
/// Most arguments in a sandbox command.
pub const COMMAND_ARGS_COUNT_MAX: usize = 256;
/// Longest single command argument.
pub const COMMAND_ARG_LENGTH_MAX: usize = 16 * 1024;
/// Most environment variables in a sandbox spec.
pub const ENV_COUNT_MAX: usize = 256;
/// Longest environment variable name.
pub const ENV_NAME_BYTES_MAX: usize = 256;
/// Longest environment variable value.
pub const ENV_VALUE_BYTES_MAX: usize = 16 * 1024;
/// Longest image reference.
pub const IMAGE_LENGTH_MAX: usize = 1024;
/// Default of the `sandboxes_per_workspace` quota (replicated
/// configuration, see [`crate::Quotas`]).
pub const SANDBOXES_PER_WORKSPACE_DEFAULT: u64 = 10_000;
/// Default of the `receipts_per_workspace` quota. A compact receipt costs
/// a few hundred bytes of disk (a replica's receipt table) and of snapshot,
/// no memory: 10 million are ~3.7 GB, under the snapshot budget
/// (`SNAPSHOT_BYTES_BUDGET` in the raft crate, 8 GiB), and a workspace
/// writing ~115 requests a second keeps a day of them.
pub const RECEIPTS_PER_WORKSPACE_DEFAULT: u64 = 10_000_000;
/// Default of the `owned_records_per_workspace` quota (SSH sessions plus
/// policies of one workspace's sandboxes).
pub const OWNED_RECORDS_PER_WORKSPACE_DEFAULT: u64 = 100_000;
/// Largest value a quota may be configured to; larger values are lowered
/// to it at apply. The state budgets (`STATE_BYTES_MAX`,
/// `SNAPSHOT_BYTES_BUDGET` in the raft crate) bound the total either way.
pub const QUOTA_VALUE_MAX: u64 = 100_000_000;
/// Largest CPU limit of a sandbox, in thousandths of a CPU (1,024 CPUs).
pub const CPU_MILLIS_MAX: u64 = 1_024_000;
/// Smallest non-zero CPU limit, in thousandths of a CPU (the Docker Engine's
/// minimum, 0.01 CPU).
pub const CPU_MILLIS_MIN: u64 = 10;
/// Smallest non-zero memory limit of a sandbox (the Docker Engine's minimum, 6 MiB).
pub const MEMORY_BYTES_MIN: u64 = 6 * 1024 * 1024;
/// Largest memory limit of a sandbox (16 TiB).
pub const MEMORY_BYTES_MAX: u64 = 16 << 40;
/// Longest working directory path of a sandbox.
pub const WORKDIR_BYTES_MAX: usize = 4096;
/// Most workspaces in the cluster.
pub const WORKSPACES_COUNT_MAX: usize = 1_000;
/// Longest failure message kept in a sandbox status.
pub const STATUS_MESSAGE_LENGTH_MAX: usize = 1024;
/// Page size used when a list request asks for 0.
pub const PAGE_SIZE_DEFAULT: usize = 100;
/// Largest page a list request may ask for.
pub const PAGE_SIZE_MAX: usize = 1_000;
/// Longest label selector expression (`-l`, `label_expression`).
pub const SELECTOR_BYTES_MAX: usize = 4096;
/// Most requirements in one label selector.
pub const SELECTOR_REQUIREMENTS_COUNT_MAX: usize = 64;
/// Largest `--older-than` a list accepts: ten years, in seconds.
pub const OLDER_THAN_SECONDS_MAX: u64 = 10 * 365 * 24 * 3600;
/// Most arguments of an `exec` command.
pub const EXEC_ARGS_COUNT_MAX: usize = COMMAND_ARGS_COUNT_MAX;
/// Most extra environment variables of an `exec`.
pub const EXEC_ENV_COUNT_MAX: usize = ENV_COUNT_MAX;
/// How long an `exec` runs when the request gives no timeout, in seconds.
pub const EXEC_TIMEOUT_SECONDS_DEFAULT: u32 = 3600;
/// Longest timeout an `exec` may ask for, in seconds (a day).
pub const EXEC_TIMEOUT_SECONDS_MAX: u32 = 24 * 3600;
/// Most `exec` commands running at once on one replica; more are refused
/// with RESOURCE_EXHAUSTED.
pub const EXECS_PER_REPLICA_MAX: usize = 256;
/// Most lines `logs --tail` may ask for.
pub const LOG_TAIL_LINES_MAX: u32 = 100_000;
/// Largest piece of output in one log or exec message.
pub const LOG_CHUNK_BYTES_MAX: usize = 64 * 1024;
/// Most `logs` streams served at once by one replica; more are refused
/// with RESOURCE_EXHAUSTED.
pub const LOG_STREAMS_PER_REPLICA_MAX: usize = 1024;
/// Longest log cursor a client may pass back.
pub const LOG_CURSOR_BYTES_MAX: usize = 256;
/// Most sandboxes one `prune` deletes at once (`--concurrency`).
pub const PRUNE_CONCURRENCY_MAX: usize = 256;
/// Most SSH sessions open on one sandbox.
pub const SESSIONS_PER_SANDBOX_MAX: usize = 10_000;
/// Longest lifetime of an SSH session.
pub const SESSION_TTL_SECONDS_MAX: u64 = 7 * 24 * 3600;
/// Largest sandbox policy document.
pub const POLICY_DOCUMENT_BYTES_MAX: usize = 64 * 1024;
/// Longest request id.
pub const REQUEST_ID_LENGTH_MAX: usize = 128;
/// Most requests that may wait on one operation (the first plus joiners).
pub const OPERATION_WAITERS_MAX: usize = 64;
/// Most runtime replacements of one sandbox under its restart policy, after
/// which it stays in ERROR.
pub const RESTARTS_MAX: u32 = 100;
/// Largest step one `Tick` moves the replicated clock (`State::clock_ms`)
/// forward: six default tick intervals (10 s). A leader whose wall clock
/// jumped ahead moves the clock by this much per tick, not to its wall
/// clock, so one jump cannot expire a whole retention window at once. After
/// an outage of length D the clock lags by D and catches up at most six
/// times faster than real time (with 10 s ticks), so a receipt settled
/// during the catch-up is kept at least 24 h − 5/6·D of wall time: the price
/// of not trusting any one leader's clock.
pub const TICK_STEP_MS_MAX: i64 = 60_000;
/// Shortest receipt retention: a settled receipt is kept at least this long
/// (counted on the replicated clock from its settlement). A configured
/// value below it is raised to it at apply.
pub const RECEIPT_RETENTION_MS_MIN: i64 = 24 * 3600 * 1000;
/// Longest receipt retention; a configured value above it is lowered to it
/// at apply, so receipts cannot accumulate for ever.
pub const RECEIPT_RETENTION_MS_MAX: i64 = 30 * 24 * 3600 * 1000;

/// Largest request message a replica decodes (public and admin API). A
/// larger one is refused with INVALID_ARGUMENT / REQUEST_TOO_LARGE before
/// it is decoded. The per-field limits above bound each part; this bounds
/// the whole, and so the size of one log entry.
pub const REQUEST_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Most encoded bytes of the items of one list page: a page ends before
/// the item that would pass it (but always holds one item), so a page of
/// large sandboxes (commands and environments of up to a request's size
/// each) stays decodable whatever its page size.
pub const LIST_PAGE_BYTES_MAX: usize = REQUEST_BYTES_MAX;
/// Largest response message a client must accept: one item can be as
/// large as the request that wrote it, plus what the server adds (status,
/// metadata). The CLI's client decodes up to this.
pub const RESPONSE_BYTES_MAX: usize = REQUEST_BYTES_MAX + 1024 * 1024;
/// Most characters of a refused input quoted back in an error message
/// (see [`crate::validate::quoted`]): enough to recognise it, never so
/// much that the error itself becomes a problem.
pub const INPUT_ECHO_CHARS_MAX: usize = 64;
/// Longest message of an error status. Statuses travel in HTTP/2 trailers
/// (the message twice: `grpc-message` and the details), which clients
/// limit; a longer message is cut.
pub const ERROR_MESSAGE_BYTES_MAX: usize = 1024;
/// Longest replica address (`HOST:PORT`): a DNS name is at most 253.
pub const ADDRESS_BYTES_MAX: usize = 260;

/// Most API tokens the cluster keeps (revoked and expired ones stay listed
/// for the audit trail and count too).
pub const API_TOKENS_COUNT_MAX: usize = 10_000;
/// Longest lifetime of an API token (`--ttl`): one year.
pub const API_TOKEN_TTL_MS_MAX: i64 = 366 * 24 * 3600 * 1000;
/// Most retired execution-token keys kept at once (each still verifying
/// until its deadline): a rotation that would retire one more while this
/// many are still in their grace is refused (RESOURCE_EXHAUSTED), never
/// cutting a promised deadline short.
pub const RETIRED_TOKEN_KEYS_COUNT_MAX: usize = 4;
/// Longest grace of a retired execution-token key
/// (`cluster rotate-token-key --grace-seconds`): seven days.
pub const TOKEN_KEY_GRACE_MS_MAX: i64 = 7 * 24 * 3600 * 1000;
/// Length of an execution-token key in hex (32 random bytes).
pub const TOKEN_KEY_HEX_LENGTH: usize = 64;
