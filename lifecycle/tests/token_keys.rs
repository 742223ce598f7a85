//! Execution-token key rotation in the replicated state: `RotateTokenKey`
//! makes its key current (ids count up), keeps the replaced key until the
//! replicated clock plus the grace (the first tick at or after the
//! deadline drops it), keeps at most `RETIRED_TOKEN_KEYS_COUNT_MAX` keys in
//! their grace (refusing rather than cutting a deadline short), validates
//! its input at apply, and is leader-internal. Apply is deterministic: the
//! same log gives the same state on every replica.

use palisade_lifecycle::limits::{RETIRED_TOKEN_KEYS_COUNT_MAX, TOKEN_KEY_GRACE_MS_MAX};
use palisade_lifecycle::{Command, LogPosition, Outcome, Reason, State, apply};

const EPOCH_MS: i64 = 1_800_000_000_000;

struct Log {
    state: State,
    index: u64,
}

impl Log {
    /// A cluster whose first leader chose key `aa..` and whose clock
    /// started at `EPOCH_MS`.
    fn initialized() -> Self {
        let mut log = Log {
            state: State::new(),
            index: 0,
        };
        log.apply(Command::InitializeCluster {
            cluster_id: "cluster".into(),
            token_secret_hex: key('a'),
            driver_identity: String::new(),
        })
        .expect("initialize");
        log.tick(EPOCH_MS);
        log
    }

    fn apply(&mut self, command: Command) -> palisade_lifecycle::Response {
        self.index += 1;
        let response = apply(
            &mut self.state,
            LogPosition {
                index: self.index,
                term: 1,
            },
            &command,
        );
        self.state.assert_invariants();
        response
    }

    fn tick(&mut self, now_ms: i64) {
        self.apply(Command::Tick {
            now_ms,
            receipt_retention_ms: 0,
        })
        .expect("tick");
    }

    fn rotate(&mut self, secret: String, grace_ms: i64) -> palisade_lifecycle::Response {
        self.apply(Command::RotateTokenKey {
            token_secret_hex: secret,
            grace_ms,
        })
    }

    /// (key id, deadline) of each retired key, oldest first.
    fn retired(&self) -> Vec<(u64, i64)> {
        let cluster = self.state.cluster.as_ref().expect("initialized");
        cluster
            .retired_token_keys
            .iter()
            .map(|key| (key.key_id, key.valid_until_ms))
            .collect()
    }

    /// Key ids that verify a token at the state's own clock.
    fn verifying(&self) -> Vec<u64> {
        let cluster = self.state.cluster.as_ref().expect("initialized");
        cluster
            .verifying_keys(self.state.clock_ms)
            .map(|(id, _)| id)
            .collect()
    }
}

/// A 64-hex-digit key made of one repeated digit.
fn key(digit: char) -> String {
    std::iter::repeat_n(digit, 64).collect()
}

#[test]
fn a_rotation_retires_the_key_until_the_replicated_clock_passes_its_grace() {
    let mut log = Log::initialized();
    assert_eq!(log.state.cluster.as_ref().unwrap().token_key_id, 1);
    assert_eq!(log.verifying(), vec![1]);

    assert_eq!(
        log.rotate(key('b'), 30_000),
        Ok(Outcome::TokenKeyRotated {
            key_id: 2,
            retired_key_id: 1,
            retired_valid_until_ms: EPOCH_MS + 30_000,
        })
    );
    let cluster = log.state.cluster.as_ref().unwrap();
    assert_eq!(
        cluster.token_secret_hex,
        key('b'),
        "new tokens use the new key"
    );
    assert_eq!(cluster.token_key_id, 2);
    assert_eq!(cluster.retired_token_keys[0].secret_hex, key('a'));
    assert_eq!(log.retired(), vec![(1, EPOCH_MS + 30_000)]);
    assert_eq!(log.verifying(), vec![2, 1], "current first, then retired");

    // Just before the deadline the old key still verifies...
    log.tick(EPOCH_MS + 29_999);
    assert_eq!(log.verifying(), vec![2, 1]);
    // ...and the first tick at the deadline drops it.
    log.tick(EPOCH_MS + 30_000);
    assert_eq!(log.retired(), vec![]);
    assert_eq!(log.verifying(), vec![2]);
}

#[test]
fn a_deadline_is_on_the_replicated_clock_not_the_proposers() {
    let mut log = Log::initialized();
    log.rotate(key('b'), 120_000).expect("rotate");
    // A leader whose wall clock jumped a day ahead moves the replicated
    // clock by one bounded step (60 s) per tick, not by the jump: the old
    // key outlives that tick...
    log.tick(EPOCH_MS + 24 * 3600 * 1000);
    assert_eq!(log.state.clock_ms, EPOCH_MS + 60_000);
    assert_eq!(log.retired(), vec![(1, EPOCH_MS + 120_000)]);
    // ...and goes at the tick that reaches its deadline.
    log.tick(EPOCH_MS + 24 * 3600 * 1000);
    assert_eq!(log.state.clock_ms, EPOCH_MS + 120_000);
    assert_eq!(log.retired(), vec![]);
}

#[test]
fn a_retired_key_checks_its_own_deadline_before_a_tick_drops_it() {
    let mut log = Log::initialized();
    log.rotate(key('b'), 10_000).expect("rotate");
    let cluster = log.state.cluster.as_ref().unwrap();
    assert_eq!(cluster.verifying_keys(EPOCH_MS + 9_999).count(), 2);
    assert_eq!(cluster.verifying_keys(EPOCH_MS + 10_000).count(), 1);
}

#[test]
fn no_grace_refuses_the_old_key_at_once() {
    let mut log = Log::initialized();
    assert_eq!(
        log.rotate(key('b'), 0),
        Ok(Outcome::TokenKeyRotated {
            key_id: 2,
            retired_key_id: 1,
            retired_valid_until_ms: EPOCH_MS,
        })
    );
    assert_eq!(log.retired(), vec![]);
    assert_eq!(log.verifying(), vec![2]);
}

#[test]
fn retired_keys_are_bounded_and_a_promised_deadline_is_never_cut_short() {
    let mut log = Log::initialized();
    let digits = ['b', 'c', 'd', 'e', 'f', '0', '1'];
    for (rotation, digit) in digits.iter().take(RETIRED_TOKEN_KEYS_COUNT_MAX).enumerate() {
        let grace = 10_000 * (rotation as i64 + 1);
        log.rotate(key(*digit), grace)
            .expect("room for a retired key");
    }
    assert_eq!(log.retired().len(), RETIRED_TOKEN_KEYS_COUNT_MAX);
    let before = log.state.clone();
    let refused = log
        .rotate(key('9'), 1_000)
        .expect_err("one retired key too many");
    assert_eq!(refused.reason, Reason::ResourceExhausted);
    assert_eq!(log.state, before, "a refused rotation changes nothing");

    // A rotation without grace needs no room.
    log.rotate(key('8'), 0).expect("no grace, no retired key");
    assert_eq!(log.retired().len(), RETIRED_TOKEN_KEYS_COUNT_MAX);

    // Once the first deadline passed, there is room again.
    log.tick(EPOCH_MS + 10_000);
    assert_eq!(log.retired().len(), RETIRED_TOKEN_KEYS_COUNT_MAX - 1);
    log.rotate(key('7'), 1_000).expect("room again");
    assert_eq!(log.retired().len(), RETIRED_TOKEN_KEYS_COUNT_MAX);
}

#[test]
fn bad_rotations_are_refused_at_apply_and_change_nothing() {
    let mut log = Log::initialized();
    let before = log.state.clone();
    let field = |name: &str| Reason::InvalidArgument { field: name.into() };
    for (secret, grace, expected) in [
        ("abc".to_string(), 1_000, field("token_secret_hex")),
        (key('z'), 1_000, field("token_secret_hex")),
        (key('a'), 1_000, field("token_secret_hex")),
        (key('b'), -1, field("grace_seconds")),
        (key('b'), TOKEN_KEY_GRACE_MS_MAX + 1, field("grace_seconds")),
    ] {
        let refused = log.rotate(secret.clone(), grace).expect_err("refused");
        assert_eq!(refused.reason, expected, "{secret} / {grace}");
        assert_eq!(log.state, before);
    }
    // Before the first leader chose a key there is nothing to rotate.
    let mut empty = Log {
        state: State::new(),
        index: 0,
    };
    let refused = empty.rotate(key('b'), 1_000).expect_err("no key yet");
    assert_eq!(refused.reason, Reason::InvalidPhase);
    assert_eq!(empty.state.cluster, None);
}

#[test]
fn the_same_log_gives_the_same_keys_on_every_replica() {
    let run = || {
        let mut log = Log::initialized();
        log.rotate(key('b'), 5_000).unwrap();
        log.tick(EPOCH_MS + 2_000);
        log.rotate(key('c'), 60_000).unwrap();
        log.tick(EPOCH_MS + 7_000);
        serde_json::to_string(&log.state).unwrap()
    };
    assert_eq!(run(), run());
    let state: State = serde_json::from_str(&run()).unwrap();
    let cluster = state.cluster.unwrap();
    assert_eq!(cluster.token_key_id, 3);
    assert_eq!(
        cluster
            .retired_token_keys
            .iter()
            .map(|key| (key.key_id, key.valid_until_ms))
            .collect::<Vec<_>>(),
        vec![(2, EPOCH_MS + 2_000 + 60_000)],
        "key 1 passed its deadline at 5 s; key 2 verifies for 60 s from its rotation"
    );
}

#[test]
fn a_state_from_before_rotation_existed_reads_as_key_1() {
    let mut log = Log::initialized();
    let mut json: serde_json::Value = serde_json::to_value(&log.state).unwrap();
    let cluster = json["cluster"].as_object_mut().unwrap();
    cluster.remove("token_key_id");
    cluster.remove("retired_token_keys");
    log.state = serde_json::from_value(json).unwrap();
    assert_eq!(log.state.cluster.as_ref().unwrap().token_key_id, 1);
    assert_eq!(log.verifying(), vec![1]);
}

#[test]
fn a_rotation_is_leader_internal_and_never_shows_its_key_in_debug() {
    let rotate = Command::RotateTokenKey {
        token_secret_hex: key('b'),
        grace_ms: 1_000,
    };
    assert!(!rotate.is_client_proposable());
    let mut log = Log::initialized();
    log.rotate(key('b'), 1_000).unwrap();
    let shown = format!(
        "{:?}",
        log.state.cluster.as_ref().unwrap().retired_token_keys
    );
    assert!(!shown.contains(&key('a')), "{shown}");
}

/// A ready sandbox `s1` (generation 1) in the default workspace.
fn ready_sandbox(log: &mut Log) {
    log.apply(Command::BeginCreate {
        id: "s1".into(),
        workspace: palisade_lifecycle::DEFAULT_WORKSPACE.into(),
        name: "one".into(),
        spec: palisade_lifecycle::SandboxSpec {
            command: vec!["sleep".into(), "1000".into()],
            ..Default::default()
        },
        labels: Default::default(),
        annotations: Default::default(),
        time_ms: EPOCH_MS,
        host_identity: "host-s1".into(),
        request: request("create"),
    })
    .expect("create");
    // Bound to the pending operation, as the executor binds completions.
    let launched = Command::CompleteLaunch {
        sandbox_id: "s1".into(),
        of: palisade_lifecycle::CompletionOf::UNBOUND,
        generation: 1,
        result: palisade_lifecycle::LaunchResult::Running {
            handle: "pid=1".into(),
            driver: "test".into(),
        },
    }
    .bound_to(&log.state, 1);
    log.apply(launched).expect("launched");
    assert_eq!(
        log.state.sandboxes["s1"].phase,
        palisade_lifecycle::SandboxPhase::Ready
    );
}

fn request(id: &str) -> palisade_lifecycle::RequestMeta {
    palisade_lifecycle::RequestMeta {
        id: id.into(),
        payload_digest: format!("digest-{id}"),
        time_ms: EPOCH_MS,
    }
}

fn stop_verified_by(key_id: Option<u64>, request_id: &str) -> Command {
    Command::BeginStop {
        target: palisade_lifecycle::SandboxTarget::Id("s1".into()),
        expected_execution: Some(palisade_lifecycle::ExecutionRef {
            sandbox_id: "s1".into(),
            generation: 1,
            key_id,
        }),
        request: request(request_id),
    }
}

#[test]
fn apply_refuses_a_stop_whose_token_key_stopped_verifying_before_it_applied() {
    // A replica a little behind verified the token under key 1; by the time
    // the stop applies, key 1 is rotated out (no grace): it changes nothing.
    let mut log = Log::initialized();
    ready_sandbox(&mut log);
    log.rotate(key('b'), 0).expect("rotate");
    let before = log.state.sandboxes.clone();
    let refused = log
        .apply(stop_verified_by(Some(1), "stop-old"))
        .expect_err("a rotated-out key verified at apply");
    assert_eq!(refused.reason, Reason::UnverifiableExecutionToken);
    assert_eq!(refused.reason.as_str(), "UNVERIFIABLE_EXECUTION_TOKEN");
    assert_eq!(log.state.sandboxes, before, "nothing changed");

    // A retired key within its grace verifies at apply; after the tick at
    // its deadline it does not.
    let mut log = Log::initialized();
    ready_sandbox(&mut log);
    log.rotate(key('b'), 5_000).expect("rotate");
    log.tick(EPOCH_MS + 5_000);
    let refused = log
        .apply(stop_verified_by(Some(1), "stop-late"))
        .expect_err("a key past its deadline verified at apply");
    assert_eq!(refused.reason, Reason::UnverifiableExecutionToken);
    // The current key does; so does an unspecified one (older commands).
    assert!(matches!(
        log.apply(stop_verified_by(Some(2), "stop-new")),
        Ok(Outcome::OperationBegun { .. })
    ));
    let mut log = Log::initialized();
    ready_sandbox(&mut log);
    log.rotate(key('b'), 0).expect("rotate");
    assert!(matches!(
        log.apply(stop_verified_by(None, "stop-legacy")),
        Ok(Outcome::OperationBegun { .. })
    ));
}

#[test]
fn a_retired_key_within_its_grace_verifies_at_apply() {
    let mut log = Log::initialized();
    ready_sandbox(&mut log);
    log.rotate(key('b'), 5_000).expect("rotate");
    log.tick(EPOCH_MS + 4_999);
    assert!(matches!(
        log.apply(stop_verified_by(Some(1), "stop-in-grace")),
        Ok(Outcome::OperationBegun { .. })
    ));
}
