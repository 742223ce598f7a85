//! Every bound Palisade enforces, in one place and named for what it limits.
//!
//! The API edge checks these and answers INVALID_ARGUMENT; `apply` checks the
//! ones that protect the replicated state again, so a buggy proposer cannot
//! grow the state without bound.

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
/// Longest environment variable value.
pub const ENV_VALUE_LENGTH_MAX: usize = 16 * 1024;
/// Longest image reference.
pub const IMAGE_LENGTH_MAX: usize = 1024;
/// Most sandboxes in one workspace.
pub const SANDBOXES_PER_WORKSPACE_MAX: usize = 10_000;
/// Most workspaces in the cluster.
pub const WORKSPACES_COUNT_MAX: usize = 1_000;
/// Longest failure message kept in a sandbox status.
pub const STATUS_MESSAGE_LENGTH_MAX: usize = 1024;
/// Page size used when a list request asks for 0.
pub const PAGE_SIZE_DEFAULT: usize = 100;
/// Largest page a list request may ask for.
pub const PAGE_SIZE_MAX: usize = 1_000;
