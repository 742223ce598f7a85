//! Generated gRPC types: the public `palisade.v1` API and the internal
//! `palisade.peer.v1` messages that replicas exchange.
//!
//! The `.proto` files beside this crate are the source of truth; this crate
//! only compiles them (with a vendored `protoc`, so no system install is
//! needed) and re-exports the generated modules, plus the one thing every
//! client makes the same way: a request id ([`new_request_id`]).

pub mod codec;
pub mod encoded;
mod request_id;

pub use request_id::new_request_id;

/// The public API (`palisade.v1`).
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("palisade.v1");
}

/// Replica-to-replica messages (`palisade.peer.v1`): Raft RPCs and forwarded
/// client writes. Not a public API.
#[allow(missing_docs, clippy::all)]
pub mod peer {
    tonic::include_proto!("palisade.peer.v1");
}

/// The gRPC error domain of every `google.rpc.ErrorInfo` Palisade returns.
pub const ERROR_DOMAIN: &str = "palisade.dev";

/// The encoded `FileDescriptorSet` of every `.proto` file compiled here,
/// for gRPC server reflection. It also describes the internal peer
/// service; the server lists only the public services (see
/// `palisade_gateway::node`).
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("palisade_descriptor");
