//! Golden files of the versioned on-disk formats, checked in under
//! `raft/testdata/`, decoded by every later release:
//!
//! - `log-entries/vN/<Variant>.json` (v1) and `.bin` (v2 on): one log
//!   entry per `Command` variant, exactly as the log store keeps it: the
//!   JSON of openraft's entry in v1, its binary encoding
//!   (`palisade_codec::Encoding::BinaryV1`) from v2, the log database's
//!   `format` 4;
//! - `snapshots/vN/snapshot`: a snapshot file (`PSNP`, format version 1)
//!   of a state holding workspaces, sandboxes, owned records, receipts,
//!   tokens and the cluster identity;
//! - `backups/vN/cluster.backup`: a backup file (`PALIBAK1`, version 1).
//!
//! Every file of every version must still decode (a release that cannot
//! read what an earlier one wrote fails here), and the current version
//! must have a log entry for every `Command` variant: the variants are read
//! from the enum itself (serde's list of expected variants), so a new
//! variant without a golden file fails this test. The current version's
//! binary entries must also be byte for byte what this build writes for
//! their sample, so a change of the encoding is a decision (a new version
//! directory), not an accident. To add one: give it a
//! sample in [`samples`] and run
//! `PALISADE_WRITE_GOLDEN=1 cargo test -p palisade-raft --test golden_formats`,
//! which writes only the files that are missing (a golden file is never
//! rewritten: it is what a released version wrote).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use openraft::EntryPayload;
use openraft::entry::RaftEntry;
use palisade_lifecycle::command::{CompletionOf, LaunchResult, SandboxTarget};
use palisade_lifecycle::{
    Attribution, Command, ExecutionRef, LogPosition, RequestMeta, SandboxSpec, State,
};
use palisade_raft::{Entry, LogId, SnapshotMeta, StoredMembership};

/// The version of the snapshot and backup files this build writes.
const CURRENT: &str = "v1";

/// The version of the log entries this build writes: v2, the binary
/// encoding (v1 was JSON).
const ENTRIES_CURRENT: &str = "v2";

/// What the log store writes for an entry (before its record's checksum).
fn stored_entry(entry: &Entry) -> Vec<u8> {
    palisade_codec::encode(entry, palisade_codec::Encoding::BinaryV1).unwrap()
}

/// The golden file of a log entry in `version`.
fn entry_file(version: &Path, variant: &str) -> PathBuf {
    let extension = if version.ends_with("v1") {
        "json"
    } else {
        "bin"
    };
    version.join(format!("{variant}.{extension}"))
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

fn write_missing() -> bool {
    std::env::var_os("PALISADE_WRITE_GOLDEN").is_some()
}

/// Every variant of `Command`, from the enum itself: serde's derive lists
/// the expected variants when it meets an unknown one.
fn command_variants() -> BTreeSet<String> {
    let error = serde_json::from_str::<Command>(r#"{"NoSuchVariant": null}"#)
        .expect_err("no such variant")
        .to_string();
    let expected = error
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("unexpected serde message: {error}"));
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The variant a command encodes as (its external tag).
fn variant_of(command: &Command) -> String {
    match serde_json::to_value(command).expect("a command encodes") {
        serde_json::Value::Object(map) => map.keys().next().expect("a tag").clone(),
        serde_json::Value::String(name) => name,
        other => panic!("unexpected encoding {other}"),
    }
}

fn request(id: &str) -> RequestMeta {
    RequestMeta {
        id: id.into(),
        payload_digest: format!("sha256-of-{id}"),
        time_ms: 1_764_000_000_000,
    }
}

const SANDBOX: &str = "5b0c3d1e-8f7a-4e2b-9c61-0d4f3a2b1c00";

/// One sample of every variant, in an order that also makes a meaningful
/// state when applied (for the snapshot and backup golden files).
fn samples() -> Vec<Command> {
    let by_name = || SandboxTarget::Name {
        workspace: "team-a".into(),
        name: "web".into(),
    };
    let create = Command::BeginCreate {
        id: SANDBOX.into(),
        workspace: "team-a".into(),
        name: "web".into(),
        spec: SandboxSpec {
            command: vec!["sleep".into(), "1000".into()],
            env: BTreeMap::from([("MODE".into(), "test".into())]),
            ..SandboxSpec::default()
        },
        labels: BTreeMap::from([("env".into(), "dev".into())]),
        annotations: BTreeMap::from([("note".into(), "golden".into())]),
        time_ms: 1_764_000_000_000,
        host_identity: "ssh-ed25519 AAAAgolden".into(),
        request: request("create-web"),
    };
    vec![
        Command::InitializeCluster {
            cluster_id: "0f2c7d2e-8d64-4f0e-9a53-3c1f7d2a9b10".into(),
            token_secret_hex: "ab".repeat(32),
            driver_identity: "process:host-a".into(),
        },
        Command::AdoptDriverIdentity {
            driver_identity: "process:host-a".into(),
        },
        Command::Tick {
            now_ms: 1_764_000_000_000,
            receipt_retention_ms: 86_400_000,
        },
        Command::RotateTokenKey {
            token_secret_hex: "ab".repeat(32),
            grace_ms: 3_600_000,
        },
        Command::ConfigureReceiptRetention {
            retention_ms: 86_400_000,
        },
        Command::ConfigureQuotas {
            receipts_per_workspace: 1_000_000,
            sandboxes_per_workspace: 10_000,
            owned_records_per_workspace: 100_000,
        },
        Command::CreateWorkspace {
            id: "7e57e57e-0000-4000-8000-000000000001".into(),
            name: "team-a".into(),
            time_ms: 1_764_000_000_000,
        },
        Command::Attributed {
            by: Attribution {
                principal: "token:abc123".into(),
                role: "editor".into(),
            },
            command: Box::new(create),
        },
        Command::BeginCreate {
            id: "5b0c3d1e-8f7a-4e2b-9c61-0d4f3a2b1c01".into(),
            workspace: "default".into(),
            name: "worker".into(),
            spec: SandboxSpec::default(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            time_ms: 1_764_000_000_000,
            host_identity: "ssh-ed25519 AAAAworker".into(),
            request: request("create-worker"),
        },
        Command::CompleteLaunch {
            sandbox_id: SANDBOX.into(),
            of: CompletionOf {
                operation_index: 7,
                term: 1,
            },
            generation: 1,
            result: LaunchResult::Running {
                handle: "pid=4242 start=99".into(),
                driver: "process".into(),
            },
        },
        Command::CreateSshSession {
            target: by_name(),
            session_id: "session-1".into(),
            token_sha256: "cd".repeat(32),
            expires_at_ms: 0,
            time_ms: 1_764_000_000_000,
            ttl_ms: 3_600_000,
        },
        Command::SetSandboxPolicy {
            target: by_name(),
            document: "{\"network\": \"none\"}".into(),
            expected_version: None,
            time_ms: 1_764_000_000_000,
        },
        Command::CreateApiToken {
            id: "tok1".into(),
            secret_sha256: "ef".repeat(32),
            role: "viewer".into(),
            workspace: "team-a".into(),
            ttl_ms: 86_400_000,
            created_by: "cert:admin".into(),
        },
        Command::BeginStop {
            target: SandboxTarget::Id(SANDBOX.into()),
            expected_execution: Some(ExecutionRef {
                sandbox_id: SANDBOX.into(),
                generation: 1,
                key_id: None,
            }),
            request: request("stop-web"),
        },
        Command::CompleteStop {
            sandbox_id: SANDBOX.into(),
            of: CompletionOf {
                operation_index: 13,
                term: 1,
            },
            generation: 1,
            exit_code: Some(143),
        },
        Command::BeginStart {
            target: by_name(),
            expected_execution: None,
            request: request("start-web"),
        },
        Command::ObserveExit {
            sandbox_id: SANDBOX.into(),
            of: CompletionOf {
                operation_index: 15,
                term: 1,
            },
            generation: 2,
            exit_code: 1,
        },
        Command::ObserveLost {
            sandbox_id: SANDBOX.into(),
            of: CompletionOf {
                operation_index: 16,
                term: 1,
            },
            generation: 2,
        },
        Command::RevokeSshSession {
            target: by_name(),
            session_id: "session-1".into(),
        },
        Command::RevokeApiToken { id: "tok1".into() },
        Command::BeginDelete {
            target: SandboxTarget::Id(SANDBOX.into()),
            expected_sandbox_id: Some(SANDBOX.into()),
            expected_execution: None,
            request: request("delete-web"),
        },
        Command::CompleteDelete {
            sandbox_id: SANDBOX.into(),
            of: CompletionOf {
                operation_index: 20,
                term: 1,
            },
        },
        Command::DeleteWorkspace {
            name: "scratch".into(),
        },
        Command::RaiseFeatureLevel { level: 2 },
    ]
}

/// The state the samples leave, applied up to `count` of them: what the
/// snapshot and backup golden files hold (stopped before the delete, so
/// the sandbox and its records are in it).
fn sample_state(count: usize) -> State {
    let mut state = State::new();
    for (offset, command) in samples().into_iter().take(count).enumerate() {
        let position = LogPosition {
            index: offset as u64 + 1,
            term: 1,
        };
        let _ = palisade_lifecycle::apply(&mut state, position, &command);
    }
    state
}

fn version_dirs(kind: &str, current: &str) -> Vec<PathBuf> {
    let dir = testdata().join(kind);
    let mut versions: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .collect();
    versions.sort();
    assert!(
        versions.iter().any(|path| path.ends_with(current)),
        "{}: no {current}",
        dir.display()
    );
    versions
}

#[test]
fn every_command_variant_has_a_golden_log_entry_of_the_current_version() {
    let variants = command_variants();
    assert!(variants.len() >= 20, "{variants:?}");
    let sampled: BTreeSet<String> = samples().iter().map(variant_of).collect();
    let unsampled: Vec<&String> = variants.difference(&sampled).collect();
    assert!(
        unsampled.is_empty(),
        "Command variants without a sample in golden_formats.rs::samples(): {unsampled:?}"
    );
    let dir = testdata().join("log-entries").join(ENTRIES_CURRENT);
    let mut missing = Vec::new();
    let mut changed = Vec::new();
    for (offset, command) in samples().into_iter().enumerate() {
        let variant = variant_of(&command);
        let path = entry_file(&dir, &variant);
        let entry = Entry::new_normal(LogId::new(1.into(), offset as u64 + 1), command.into());
        let written = stored_entry(&entry);
        match std::fs::read(&path) {
            Ok(golden) => {
                if golden != written {
                    changed.push(variant);
                }
            }
            Err(_) if write_missing() => {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, written).unwrap();
            }
            Err(_) => missing.push(variant),
        }
    }
    assert!(
        missing.is_empty(),
        "no golden log entry in {} for {missing:?}: add a sample and run with PALISADE_WRITE_GOLDEN=1",
        dir.display()
    );
    assert!(
        changed.is_empty(),
        "this build encodes the samples of {changed:?} differently from their golden files in \
         {}: the log's encoding changed. Older bytes must still decode (the test of every \
         version checks it); to make the change deliberate, start a new version directory \
         (ENTRIES_CURRENT) and write it with PALISADE_WRITE_GOLDEN=1. Never rewrite a file.",
        dir.display()
    );
}

#[test]
fn golden_log_entries_of_every_version_decode_and_apply() {
    let variants = command_variants();
    let mut decoded = 0;
    for version in version_dirs("log-entries", ENTRIES_CURRENT) {
        for file in std::fs::read_dir(&version).unwrap() {
            let path = file.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let entry: Entry = palisade_codec::decode(&bytes)
                .unwrap_or_else(|error| panic!("{} does not decode: {error}", path.display()));
            let EntryPayload::Normal(command) = &entry.payload else {
                panic!("{}: not a command entry", path.display());
            };
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            assert_eq!(variant_of(command), stem, "{}", path.display());
            assert!(
                variants.contains(&stem),
                "{stem} is no longer a Command variant"
            );
            // Apply understands it (any outcome; no panic).
            let mut state = State::new();
            let position = LogPosition {
                index: entry.log_id().index,
                term: 1,
            };
            let _ = palisade_lifecycle::apply(&mut state, position, command);
            decoded += 1;
        }
    }
    assert!(decoded >= variants.len(), "{decoded} golden entries");
}

/// Samples applied into the golden state: up to the last one before the
/// delete (`BeginDelete` is the 20th).
const STATE_SAMPLES: usize = 19;

#[tokio::test]
async fn golden_snapshots_of_every_version_open() {
    use openraft::storage::RaftStateMachine;
    let current = testdata().join("snapshots").join(CURRENT);
    if !current.join("snapshot").exists() && write_missing() {
        let state = sample_state(STATE_SAMPLES);
        let log_id = LogId::new(1.into(), STATE_SAMPLES as u64);
        let meta = SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::new(
                Some(LogId::new(1.into(), 1)),
                openraft::Membership::new(
                    vec![BTreeSet::from([1, 2, 3])],
                    BTreeMap::from([1, 2, 3].map(|id| {
                        (
                            id,
                            openraft::impls::BasicNode {
                                addr: format!("127.0.0.1:710{id}"),
                            },
                        )
                    })),
                )
                .unwrap(),
            ),
        };
        palisade_storage::SnapshotFiles::<SnapshotMeta>::open(&current)
            .unwrap()
            .save(&meta, &serde_json::to_vec(&state).unwrap())
            .unwrap();
    }
    for version in version_dirs("snapshots", CURRENT) {
        let copy = tempfile::tempdir().unwrap();
        std::fs::copy(version.join("snapshot"), copy.path().join("snapshot"))
            .unwrap_or_else(|error| panic!("{}: {error}", version.display()));
        let mut machine = palisade_raft::LifecycleStateMachine::open(copy.path())
            .unwrap_or_else(|error| panic!("{}: {error}", version.display()));
        let (applied, membership) = machine.applied_state().await.unwrap();
        assert!(applied.is_some(), "{}", version.display());
        assert_eq!(membership.membership().voter_ids().count(), 3);
        let handle = machine.handle();
        handle.read(|applied| {
            applied.state.assert_invariants();
            assert!(applied.state.workspaces.contains_key("team-a"));
            assert!(applied.state.sandboxes.contains_key(SANDBOX));
            assert!(applied.state.cluster.is_some());
        });
    }
}

#[test]
fn golden_backups_of_every_version_decode() {
    use palisade_raft::backup;
    let current = testdata().join("backups").join(CURRENT);
    let file = current.join("cluster.backup");
    if !file.exists() && write_missing() {
        let state = serde_json::to_vec(&sample_state(STATE_SAMPLES)).unwrap();
        let header = backup::BackupHeader {
            applied_index: STATE_SAMPLES as u64,
            applied_term: 1,
            cluster_id: "0f2c7d2e-8d64-4f0e-9a53-3c1f7d2a9b10".into(),
            state_digest: backup::state_digest(&state),
            state_encoding: backup::STATE_ENCODING_JSON.into(),
            node_id: 1,
            created_at_ms: 1_764_000_000_000,
            palisade_version: env!("CARGO_PKG_VERSION").into(),
        };
        std::fs::create_dir_all(&current).unwrap();
        std::fs::write(&file, backup::encode(&header, &state)).unwrap();
    }
    for version in version_dirs("backups", CURRENT) {
        let path = version.join("cluster.backup");
        let bytes =
            std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let decoded =
            backup::decode(&bytes).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        decoded.state.assert_invariants();
        assert!(decoded.state.sandboxes.contains_key(SANDBOX));
    }
}
