//! What one sandbox costs the state in memory (issue 18: under 1 KiB per
//! sandbox, so that a replica holds a million of them). Counted with this
//! test binary's own allocator, for sandboxes as a gateway creates them
//! (a label, an SSH host identity, a running noop execution), both as
//! apply builds them and as a replica decodes them from a snapshot.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use palisade_lifecycle::{
    Command, CompletionOf, LaunchResult, LogPosition, RequestMeta, SandboxSpec, State, apply,
};

/// Live heap bytes of this process.
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

struct Counting;

// SAFETY: every call goes to the system allocator unchanged; the counter
// is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SANDBOXES: u64 = 20_000;
const WORKSPACES: u64 = 10;
/// The target: state memory per sandbox.
const BYTES_PER_SANDBOX_MAX: f64 = 1024.0;

/// A UUID-shaped id, different for every `n` and in no particular order
/// (as random ids are): a 64-bit mix of `n`.
fn uuid_like(n: u64, salt: u64) -> String {
    let mut x = n.wrapping_add(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        x >> 32,
        (x >> 16) & 0xffff,
        x & 0xfff,
        n & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

/// `SANDBOXES` READY sandboxes over `WORKSPACES` workspaces, applied as
/// the gateway and the executor propose them; the receipts dropped (a
/// replica keeps them on disk, not in memory).
fn state_of_many_sandboxes() -> State {
    let mut state = State::new();
    let mut index = 0;
    let mut step = |state: &mut State, command: Command| {
        index += 1;
        let command = command.bound_to(state, 1);
        let position = LogPosition { index, term: 1 };
        apply(state, position, &command).expect("the command applies");
    };
    let workspaces: Vec<String> = (0..WORKSPACES).map(|n| format!("team-{n}")).collect();
    for (n, name) in workspaces.iter().enumerate() {
        step(
            &mut state,
            Command::CreateWorkspace {
                id: uuid_like(n as u64, 1),
                name: name.clone(),
                time_ms: 0,
            },
        );
    }
    for n in 0..SANDBOXES {
        let id = uuid_like(n, 2);
        step(
            &mut state,
            Command::BeginCreate {
                id: id.clone(),
                workspace: workspaces[(n % WORKSPACES) as usize].clone(),
                name: format!("agent-{n:07}"),
                spec: SandboxSpec {
                    command: vec!["sleep".into(), "infinity".into()],
                    ..Default::default()
                },
                labels: BTreeMap::from([("app".to_string(), "agent".to_string())]),
                annotations: BTreeMap::new(),
                time_ms: 0,
                host_identity: format!("ssh-host-{}", uuid_like(n, 3).replace('-', "")),
                request: RequestMeta {
                    id: uuid_like(n, 4),
                    payload_digest: format!("{:064x}", n),
                    time_ms: 0,
                },
            },
        );
        step(
            &mut state,
            Command::CompleteLaunch {
                sandbox_id: id.clone(),
                of: CompletionOf::UNBOUND,
                generation: 1,
                result: LaunchResult::Running {
                    handle: format!("id=noop-{id}-1"),
                    driver: "noop".into(),
                },
            },
        );
    }
    state.receipts = Default::default();
    state
}

fn live() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

#[test]
fn a_sandbox_costs_the_state_less_than_a_kibibyte() {
    let state = state_of_many_sandboxes();
    assert_eq!(state.sandboxes.len() as u64, SANDBOXES);

    // As apply holds it: a clone has the same shape (every node and
    // string copied as it is), so its heap is the state's.
    let before = live();
    let copy = state.clone();
    let applied = (live() - before) as f64 / SANDBOXES as f64;
    drop(copy);

    // As a replica holds it after decoding a snapshot.
    let encoded = serde_json::to_vec(&state).unwrap();
    let before = live();
    let decoded: State = serde_json::from_slice(&encoded).unwrap();
    let from_snapshot = (live() - before) as f64 / SANDBOXES as f64;
    assert_eq!(decoded, state);
    drop(decoded);

    eprintln!("state heap per sandbox: {applied:.0} B as applied, {from_snapshot:.0} B decoded");
    assert!(
        applied < BYTES_PER_SANDBOX_MAX,
        "{applied:.0} bytes per sandbox as applied"
    );
    assert!(
        from_snapshot < BYTES_PER_SANDBOX_MAX,
        "{from_snapshot:.0} bytes per sandbox decoded"
    );
}
