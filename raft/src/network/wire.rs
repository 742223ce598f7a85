//! The wire contract shared with [`peer_service`](crate::peer_service): what
//! each `payload` holds, how it is encoded, and the size limits both sides
//! enforce. Changing anything here changes what the other replicas must
//! understand.
//!
//! A payload is in `palisade_codec`'s binary encoding once the cluster's
//! feature level reached `FEATURE_LEVEL_BINARY_PEER_PAYLOADS` (every voter
//! decodes it then), JSON before; a receiver decodes both, and answers in
//! the encoding of the request, so a reply is always in an encoding its
//! requester sent and therefore reads.

use openraft::errors::{ClientWriteError, Fatal, RaftError};
use openraft::raft::{
    AppendEntriesResponse, ClientWriteResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderResponse, VoteResponse,
};
pub(crate) use palisade_codec::{DecodeError, Encoding};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::feature_level::FEATURE_LEVEL_BINARY_PEER_PAYLOADS;
use crate::types::{SnapshotMeta, TypeConfig, Vote};

/// Largest piece of snapshot data sent in one `SnapshotChunk`. openraft's
/// `snapshot_max_chunk_size` can only make chunks smaller.
pub const SNAPSHOT_CHUNK_BYTES_MAX: usize = 1024 * 1024;

/// Largest snapshot a replica sends or accepts. Snapshots are files on
/// both ends (`palisade_storage::snapshot_bytes`), so this bounds the disk
/// a transfer may fill on the receiver, not its memory.
pub const SNAPSHOT_BYTES_MAX: u64 = 16 * 1024 * 1024 * 1024;

/// Largest encoded peer message, either way. AppendEntries batches are
/// bounded by openraft's `max_payload_entries` and commands by the
/// lifecycle limits; this only keeps a confused peer from making us buffer
/// without bound (tonic's own default, 4 MiB, is too tight for a batch).
pub const PEER_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// `AppendEntries` reply payload.
pub(crate) type AppendReply = Result<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>>;
/// One `StreamAppend` reply payload (one per request, in order).
pub(crate) type StreamAppendReply = Result<StreamAppendResult<TypeConfig>, Fatal<TypeConfig>>;
/// `Vote` and `PreVote` reply payload.
pub(crate) type VoteReply = Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>;
/// `InstallSnapshot` reply payload.
pub(crate) type SnapshotReply = Result<SnapshotResponse<TypeConfig>, Fatal<TypeConfig>>;
/// `TransferLeader` reply payload.
pub(crate) type TransferLeaderReply = Result<TransferLeaderResponse<TypeConfig>, Fatal<TypeConfig>>;
/// `ReadIndex` reply payload: the read index, or why the leader could not
/// confirm its leadership.
pub(crate) type ReadIndexReply = Result<u64, String>;
/// `ForwardWrite` reply payload.
pub(crate) type ForwardWriteReply =
    Result<ClientWriteResponse<TypeConfig>, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>;

/// The `header` of a snapshot transfer's first chunk.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SnapshotHeader {
    /// The sending leader's vote, passed to `Raft::install_full_snapshot`.
    pub(crate) vote: Vote,
    /// What the snapshot covers.
    pub(crate) meta: SnapshotMeta,
    /// Total bytes of snapshot data that follow; the receiver installs only
    /// when it got exactly this many, so a cut transfer is never installed.
    pub(crate) size_bytes: u64,
}

/// Encodes a payload in `encoding`: the sender's
/// ([`PeerClients`](super::PeerClients)'s, from the cluster feature level)
/// for a request, the request's for its reply.
///
/// Panics only on a programmer error: every payload is an openraft or
/// lifecycle type with derived `Serialize`, whose maps have string or
/// integer keys, which both encodings carry.
pub(crate) fn encode<T: Serialize>(value: &T, encoding: Encoding) -> Vec<u8> {
    palisade_codec::encode(value, encoding)
        .expect("peer payloads are derived-Serialize types with string or integer map keys")
}

/// Decodes a payload in either encoding; an error means the peer speaks
/// another version.
///
/// A build that supports a feature level below
/// `FEATURE_LEVEL_BINARY_PEER_PAYLOADS` (only the TEST-ONLY lowered level
/// of `crate::feature_level` makes one) refuses binary payloads as the
/// releases before the binary encoding do, so that the mixed-level test
/// proves no binary payload reaches a replica before the raise.
pub(crate) fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, DecodeError> {
    if crate::feature_level::supported() < FEATURE_LEVEL_BINARY_PEER_PAYLOADS
        && Encoding::of(payload)? == Encoding::BinaryV1
    {
        return Err(DecodeError::UnknownTag {
            tag: palisade_codec::BINARY_V1_TAG,
        });
    }
    palisade_codec::decode(payload)
}

/// The encoding of a received payload, so that its reply can use it. An
/// empty or unknown one is answered as JSON (the decode error says why).
pub(crate) fn encoding_of(payload: &[u8]) -> Encoding {
    Encoding::of(payload).unwrap_or(Encoding::Json)
}

/// Golden files of every payload kind, checked in under
/// `raft/testdata/peer-payloads/vN/<name>.bin`: what a replica of that
/// version sends in the binary encoding. Every file of every version must
/// decode, and the current version's must be byte for byte what this build
/// sends, so that a change of the wire is a decision (a new version
/// directory, written with `PALISADE_WRITE_GOLDEN=1`; a file is never
/// rewritten), not an accident. The JSON of every sample must decode too:
/// it is what replicas send before the cluster's level allows binary.
#[cfg(test)]
mod golden {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    use openraft::entry::RaftEntry;
    use openraft::errors::ForwardToLeader;
    use openraft::raft::{
        AppendEntriesRequest, StreamAppendError, TransferLeaderRequest, VoteRequest,
    };
    use openraft::{BasicNode, Membership};
    use palisade_lifecycle::command::SandboxTarget;
    use palisade_lifecycle::{Command, ExecutionRef, Outcome, Reason, Rejection, RequestMeta};

    use super::*;
    use crate::types::{Entry, LogId, StoredMembership};

    const CURRENT: &str = "v1";

    fn dir(version: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/peer-payloads")
            .join(version)
    }

    fn vote() -> Vote {
        Vote::new_committed(7, 1)
    }

    fn delete_command() -> Command {
        Command::BeginDelete {
            target: SandboxTarget::Name {
                workspace: "team-a".into(),
                name: "web".into(),
            },
            expected_sandbox_id: Some("5b0c3d1e-8f7a-4e2b-9c61-0d4f3a2b1c00".into()),
            expected_execution: Some(ExecutionRef {
                sandbox_id: "5b0c3d1e-8f7a-4e2b-9c61-0d4f3a2b1c00".into(),
                generation: 2,
                key_id: Some(1),
            }),
            request: RequestMeta {
                id: "delete-web".into(),
                payload_digest: "sha256-of-delete-web".into(),
                time_ms: 1_764_000_000_000,
            },
        }
    }

    fn membership() -> Membership<u64, BasicNode> {
        Membership::new(
            vec![BTreeSet::from([1, 2, 3])],
            BTreeMap::from([1, 2, 3].map(|id| (id, BasicNode::new(format!("127.0.0.1:710{id}"))))),
        )
        .unwrap()
    }

    /// One sample of every payload kind, as a function that encodes it in
    /// an encoding and one that decodes and re-encodes it in binary (so
    /// that a decoded value is compared by its bytes: not every openraft
    /// type has `PartialEq`).
    type Codec = (
        Box<dyn Fn(Encoding) -> Vec<u8>>,
        fn(&[u8]) -> Result<Vec<u8>, DecodeError>,
    );

    fn sample<T: Serialize + DeserializeOwned + 'static>(value: T) -> Codec {
        (
            Box::new(move |encoding| encode(&value, encoding)),
            |bytes| decode::<T>(bytes).map(|value| encode(&value, Encoding::BinaryV1)),
        )
    }

    fn samples() -> Vec<(&'static str, Codec)> {
        let entries: Vec<Entry> = vec![
            Entry::new_blank(LogId::new(7.into(), 41)),
            Entry::new_normal(LogId::new(7.into(), 42), delete_command().into()),
            Entry::new_membership(LogId::new(7.into(), 43), membership()),
        ];
        let append = AppendEntriesRequest::<TypeConfig> {
            vote: vote(),
            prev_log_id: Some(LogId::new(6.into(), 40)),
            entries,
            leader_commit: Some(LogId::new(6.into(), 40)),
        };
        let written = ClientWriteResponse::<TypeConfig> {
            log_id: LogId::new(7.into(), 42),
            data: Ok(Outcome::OperationBegun {
                sandbox_id: "5b0c3d1e-8f7a-4e2b-9c61-0d4f3a2b1c00".into(),
                kind: palisade_lifecycle::OperationKind::Delete,
                generation: 2,
            }),
            membership: None,
        };
        let refused = ClientWriteResponse::<TypeConfig> {
            log_id: LogId::new(7.into(), 44),
            data: Err(Rejection {
                reason: Reason::NameTaken,
                message: "team-a/web exists".into(),
            }),
            membership: None,
        };
        let not_leader: ForwardWriteReply =
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(
                ForwardToLeader::new(2, BasicNode::new("127.0.0.1:7102")),
            )));
        vec![
            (
                "vote-request",
                sample(VoteRequest::<TypeConfig>::new(
                    vote(),
                    Some(LogId::new(6.into(), 40)),
                )),
            ),
            (
                "vote-reply",
                sample::<VoteReply>(Ok(VoteResponse::new(
                    vote(),
                    Some(LogId::new(6.into(), 40)),
                    true,
                ))),
            ),
            ("append-request", sample(append)),
            (
                "append-reply",
                sample::<AppendReply>(Ok(AppendEntriesResponse::Success)),
            ),
            (
                "stream-append-reply",
                sample::<StreamAppendReply>(Ok(Ok(Some(LogId::new(7.into(), 43))))),
            ),
            (
                "stream-append-conflict",
                sample::<StreamAppendReply>(Ok(Err(StreamAppendError::Conflict(LogId::new(
                    6.into(),
                    40,
                ))))),
            ),
            (
                "snapshot-header",
                sample(SnapshotHeader {
                    vote: vote(),
                    meta: SnapshotMeta {
                        last_log_id: Some(LogId::new(7.into(), 43)),
                        last_membership: StoredMembership::new(
                            Some(LogId::new(7.into(), 43)),
                            membership(),
                        ),
                    },
                    size_bytes: 1 << 20,
                }),
            ),
            ("forward-write", sample(delete_command())),
            (
                "forward-write-reply",
                sample::<ForwardWriteReply>(Ok(written)),
            ),
            (
                "forward-write-rejected",
                sample::<ForwardWriteReply>(Ok(refused)),
            ),
            ("forward-write-not-leader", sample(not_leader)),
            ("read-index-reply", sample::<ReadIndexReply>(Ok(42))),
            (
                "transfer-leader-request",
                sample(TransferLeaderRequest::<TypeConfig>::new(
                    vote(),
                    2,
                    Some(LogId::new(7.into(), 43)),
                )),
            ),
            (
                "transfer-leader-reply",
                sample::<TransferLeaderReply>(Ok(Ok(()))),
            ),
        ]
    }

    #[test]
    fn every_payload_kind_is_sent_as_its_golden_file_and_every_version_decodes() {
        let current = dir(CURRENT);
        let write_missing = std::env::var_os("PALISADE_WRITE_GOLDEN").is_some();
        let mut problems = Vec::new();
        for (name, (encode_in, redecode)) in samples() {
            let binary = encode_in(Encoding::BinaryV1);
            assert_eq!(binary[0], palisade_codec::BINARY_V1_TAG, "{name}");
            // The JSON a replica sends before the raise decodes to the same.
            let json = encode_in(Encoding::Json);
            assert_eq!(redecode(&json).unwrap(), binary, "{name}: JSON round trip");
            let path = current.join(format!("{name}.bin"));
            match std::fs::read(&path) {
                Ok(golden) if golden != binary => problems.push(format!(
                    "{name}: this build sends other bytes than {}",
                    path.display()
                )),
                Ok(_) => {}
                Err(_) if write_missing => {
                    std::fs::create_dir_all(&current).unwrap();
                    std::fs::write(&path, &binary).unwrap();
                }
                Err(error) => problems.push(format!("{}: {error}", path.display())),
            }
        }
        let codecs: BTreeMap<&str, Codec> = samples().into_iter().collect();
        for version in std::fs::read_dir(current.parent().unwrap()).unwrap() {
            for file in std::fs::read_dir(version.unwrap().path()).unwrap() {
                let path = file.unwrap().path();
                let name = path.file_stem().unwrap().to_string_lossy().to_string();
                let Some((_, redecode)) = codecs.get(name.as_str()) else {
                    problems.push(format!("{}: no such payload kind", path.display()));
                    continue;
                };
                if let Err(error) = redecode(&std::fs::read(&path).unwrap()) {
                    problems.push(format!("{} does not decode: {error}", path.display()));
                }
            }
        }
        assert!(
            problems.is_empty(),
            "{problems:#?}\nA changed encoding must still decode what older versions sent; \
             make it deliberate with a new version directory (PALISADE_WRITE_GOLDEN=1 writes \
             missing files); never rewrite one."
        );
    }
}
