//! How failures become gRPC statuses: a code plus a `google.rpc.ErrorInfo`
//! with a stable reason (domain `palisade.dev`), so clients match on the
//! reason, never on the message.
//!
//! Every status is built by [`status`], which cuts its message and metadata
//! values to [`ERROR_MESSAGE_BYTES_MAX`]: a status travels in HTTP/2
//! trailers (the message twice, in `grpc-message` and in the details), and
//! clients refuse large ones, which they then report as a broken connection.

use std::collections::HashMap;

use palisade_lifecycle::limits::ERROR_MESSAGE_BYTES_MAX;
use palisade_lifecycle::validate::InvalidInput;
use palisade_lifecycle::{Reason, Rejection};
use palisade_proto::ERROR_DOMAIN;
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

/// Reason: the operation was accepted but its outcome is not known yet.
pub const OUTCOME_PENDING: &str = "OUTCOME_PENDING";
/// Reason: the replica that held the request lost leadership meanwhile.
pub const LEADERSHIP_CHANGED: &str = "LEADERSHIP_CHANGED";
/// Reason: no leader is known (election in progress or no quorum).
pub const NO_LEADER: &str = "NO_LEADER";
/// Reason: this replica is shutting down.
pub const SHUTTING_DOWN: &str = "SHUTTING_DOWN";
/// Reason: an internal failure (storage, Raft core); retry elsewhere.
pub const INTERNAL: &str = "INTERNAL";
/// Reason: the request body is not one well-formed, uncompressed gRPC
/// message of the method's request type (a truncated or extra frame, a
/// string that is not UTF-8, a wrong wire type...).
pub const MALFORMED_MESSAGE: &str = palisade_proto::codec::MALFORMED_MESSAGE;
/// Reason: the request message is larger than
/// `palisade_lifecycle::limits::REQUEST_BYTES_MAX`.
pub const REQUEST_TOO_LARGE: &str = "REQUEST_TOO_LARGE";
/// Reason: a watch asked to resume from a resource version the cluster has
/// not reached.
pub const RESOURCE_VERSION_TOO_NEW: &str = "RESOURCE_VERSION_TOO_NEW";
/// Reason: a watch asked to resume from a resource version whose changes
/// are no longer retained.
pub const RESOURCE_VERSION_TOO_OLD: &str = "RESOURCE_VERSION_TOO_OLD";

/// Reason: the replica already serves as many requests as its limit
/// (`--requests-in-flight-max`) allows; retry after the RetryInfo delay.
pub const OVERLOADED: &str = "OVERLOADED";

/// RESOURCE_EXHAUSTED, reason [`OVERLOADED`]: a request shed before it
/// reached a handler (nothing was proposed), with a RetryInfo delay.
pub fn overloaded(
    requests_in_flight_max: usize,
    retry_after: std::time::Duration,
) -> tonic::Status {
    let mut details = ErrorDetails::with_error_info(
        OVERLOADED,
        ERROR_DOMAIN,
        HashMap::from([(
            "requests_in_flight_max".to_string(),
            requests_in_flight_max.to_string(),
        )]),
    );
    details.set_retry_info(Some(retry_after));
    tonic::Status::with_error_details(
        Code::ResourceExhausted,
        format!(
            "this replica is serving its maximum of {requests_in_flight_max} requests and took \
             no action; retry in {} ms",
            retry_after.as_millis()
        ),
        details,
    )
}

/// RESOURCE_EXHAUSTED for a watch beyond the replica's watcher limit
/// (`--watchers-max`): reason OVERLOADED, metadata `watchers_max`, and a
/// RetryInfo delay. Nothing was started for the refused watch.
pub fn watchers_exhausted(watchers_max: usize, retry_after: std::time::Duration) -> tonic::Status {
    let mut details = ErrorDetails::with_error_info(
        OVERLOADED,
        ERROR_DOMAIN,
        HashMap::from([("watchers_max".to_string(), watchers_max.to_string())]),
    );
    details.set_retry_info(Some(retry_after));
    tonic::Status::with_error_details(
        Code::ResourceExhausted,
        format!(
            "this replica is serving its maximum of {watchers_max} watch streams; retry in {} ms, \
             or watch through another replica",
            retry_after.as_millis()
        ),
        details,
    )
}

/// `text` cut to at most [`ERROR_MESSAGE_BYTES_MAX`] bytes, on a character
/// boundary, saying so when it was cut.
pub fn bounded(text: String) -> String {
    if text.len() <= ERROR_MESSAGE_BYTES_MAX {
        return text;
    }
    const CUT: &str = "... (cut)";
    let mut end = ERROR_MESSAGE_BYTES_MAX - CUT.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT}", &text[..end])
}

/// Builds a status with an ErrorInfo carrying `reason` and optional metadata.
pub fn status(
    code: Code,
    reason: &str,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (&'static str, String)>,
) -> tonic::Status {
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(key, value)| (key.to_string(), bounded(value)))
        .collect();
    tonic::Status::with_error_details(
        code,
        bounded(message.into()),
        ErrorDetails::with_error_info(reason, ERROR_DOMAIN, metadata),
    )
}

/// INVALID_ARGUMENT for a malformed field, with a field-specific reason
/// (`INVALID_NAME`, `INVALID_SPEC_COMMAND`, ...) and the field in metadata.
pub fn invalid_input(invalid: InvalidInput) -> tonic::Status {
    let reason = Reason::InvalidArgument {
        field: invalid.field.to_string(),
    }
    .as_str();
    status(
        Code::InvalidArgument,
        &reason,
        invalid.to_string(),
        [("field", invalid.field.to_string())],
    )
}

/// The status for a rejection decided at apply.
pub fn rejection(rejection: Rejection) -> tonic::Status {
    let code = match &rejection.reason {
        Reason::InvalidArgument { .. } => Code::InvalidArgument,
        Reason::NameTaken => Code::AlreadyExists,
        Reason::WorkspaceNotFound | Reason::SandboxNotFound => Code::NotFound,
        Reason::InvalidPhase
        | Reason::WorkspaceNotEmpty
        | Reason::WorkspaceTerminating
        | Reason::DefaultWorkspaceProtected => Code::FailedPrecondition,
        Reason::ResourceExhausted | Reason::QuotaExceeded { .. } => Code::ResourceExhausted,
        Reason::SandboxIdentityMismatch | Reason::StaleExecution => Code::Aborted,
        Reason::RequestIdReused => Code::AlreadyExists,
        Reason::SessionNotFound | Reason::TokenNotFound => Code::NotFound,
        Reason::PolicyVersionMismatch => Code::Aborted,
        // As the gateway's own refusal of such a token (`crate::token`).
        Reason::UnverifiableExecutionToken => Code::FailedPrecondition,
    };
    let metadata = match &rejection.reason {
        Reason::InvalidArgument { field } => vec![("field", field.clone())],
        // The quota's name, so a client tells which one it hit without
        // parsing the message.
        Reason::QuotaExceeded {
            quota,
            workspace,
            limit,
        } => vec![
            ("quota", quota.clone()),
            ("workspace", workspace.clone()),
            ("limit", limit.to_string()),
        ],
        _ => vec![],
    };
    status(
        code,
        &rejection.reason.as_str(),
        rejection.message,
        metadata,
    )
}

/// NOT_FOUND for a sandbox.
pub fn sandbox_not_found(what: impl std::fmt::Display) -> tonic::Status {
    status(
        Code::NotFound,
        "SANDBOX_NOT_FOUND",
        format!("no sandbox {what}"),
        [],
    )
}

/// NOT_FOUND for a workspace.
pub fn workspace_not_found(name: &str) -> tonic::Status {
    status(
        Code::NotFound,
        "WORKSPACE_NOT_FOUND",
        format!("workspace {name:?} does not exist"),
        [],
    )
}

/// UNAVAILABLE: retryable, with the reason saying why.
pub fn unavailable(reason: &str, message: impl Into<String>) -> tonic::Status {
    status(Code::Unavailable, reason, message, [])
}

/// The ErrorInfo reason of a status, if it carries one.
pub fn reason_of(status: &tonic::Status) -> Option<String> {
    status.get_details_error_info().map(|info| info.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_metadata_are_bounded() {
        let long = "é".repeat(ERROR_MESSAGE_BYTES_MAX);
        let status = status(Code::InvalidArgument, "X", long.clone(), [("k", long)]);
        assert!(status.message().len() <= ERROR_MESSAGE_BYTES_MAX);
        assert!(status.message().ends_with("(cut)"));
        let info = status.get_details_error_info().unwrap();
        assert!(info.metadata["k"].len() <= ERROR_MESSAGE_BYTES_MAX);
        assert_eq!(bounded("short".into()), "short");
    }
}
