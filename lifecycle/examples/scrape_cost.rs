//! What one `/metrics` scrape cost the replica, before and after the
//! census: the time the gauges of the state's size held the state's read
//! lock (which every apply waits for), for a state of N sandboxes as the
//! 256-client benchmark leaves it (each created through a request, so
//! each has its receipt).
//!
//! `cargo run --release -p palisade-lifecycle --example scrape_cost -- 40000`
//!
//! - before: encode the whole state (JSON, as a snapshot) to count its
//!   bytes, and walk every sandbox for those with a pending operation;
//! - after: copy the census kept at apply and read two lengths.

use std::collections::BTreeMap;
use std::time::Instant;

use palisade_lifecycle::*;

struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn main() {
    let sandboxes: u64 = std::env::args()
        .nth(1)
        .map(|text| text.parse().expect("the number of sandboxes"))
        .unwrap_or(40_000);
    let mut state = State::new();
    state.quotas.sandboxes_per_workspace = limits::QUOTA_VALUE_MAX;
    state.quotas.receipts_per_workspace = limits::QUOTA_VALUE_MAX;
    let mut census = Census::of(&state);
    let mut index = 0;
    let mut next = |state: &mut State, census: &mut Census, command: Command| {
        index += 1;
        let command = command.bound_to(state, 1);
        census
            .apply(state, LogPosition { index, term: 1 }, &command)
            .expect("the command applies");
    };
    for n in 0..sandboxes {
        let id = format!("00000000-0000-4000-8000-{n:012}");
        next(
            &mut state,
            &mut census,
            Command::BeginCreate {
                id: id.clone(),
                workspace: DEFAULT_WORKSPACE.into(),
                name: format!("bench-{n}"),
                spec: SandboxSpec {
                    command: vec!["sleep".into(), "1000".into()],
                    ..Default::default()
                },
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                time_ms: 1,
                host_identity: "bench-host".into(),
                request: RequestMeta {
                    id: format!("request-{n}"),
                    payload_digest: format!("digest-{n}"),
                    time_ms: 1,
                },
            },
        );
        next(
            &mut state,
            &mut census,
            Command::CompleteLaunch {
                sandbox_id: id,
                of: CompletionOf::UNBOUND,
                generation: 1,
                result: LaunchResult::Running {
                    handle: format!("pid={n} start={n}"),
                    driver: "process".into(),
                },
            },
        );
    }
    let rounds = 20;
    let started = Instant::now();
    let mut before = (0, 0, 0, 0);
    for _ in 0..rounds {
        let mut count = ByteCount(0);
        serde_json::to_writer(&mut count, &state).expect("the state encodes");
        let pending = state
            .sandboxes
            .values()
            .filter(|sandbox| sandbox.operation.is_some())
            .count();
        before = (
            state.receipts.len(),
            state.sandboxes.len(),
            pending,
            count.0,
        );
    }
    let before_each = started.elapsed() / rounds;
    let started = Instant::now();
    let mut after = (0, 0, 0);
    for _ in 0..rounds {
        let copy = census.clone();
        after = (
            state.receipts.len(),
            copy.sandboxes() as usize,
            copy.pending() as usize,
        );
    }
    let after_each = started.elapsed() / rounds;
    assert_eq!((before.0, before.1, before.2), after);
    println!(
        "{sandboxes} sandboxes, {} receipts, state {} bytes encoded",
        before.0, before.3
    );
    println!("per scrape, before (encode + walk under the read lock): {before_each:?}");
    println!("per scrape, after (census copy + two lengths): {after_each:?}");
}
