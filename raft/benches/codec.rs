//! How long the log's entries take to encode and decode, JSON against the
//! binary encoding (`palisade_codec`), and how large they are: a batch of
//! 64 entries, half `BeginCreate`, half `BeginDelete` with its
//! preconditions, the shape of an AppendEntries batch under load.
//!
//! `cargo bench -p palisade-raft --bench codec [-- --seconds N]` prints a
//! table; each cell runs for N seconds (default 3).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use openraft::entry::RaftEntry;
use palisade_codec::Encoding;
use palisade_lifecycle::command::SandboxTarget;
use palisade_lifecycle::{Command, ExecutionRef, RequestMeta, SandboxSpec};
use palisade_raft::{Entry, LogId};

const BATCH: u64 = 64;

fn batch() -> Vec<Entry> {
    (0..BATCH)
        .map(|i| {
            let sandbox_id = format!("0b7e{i:04}-1c2d-4e5f-8a9b-0c1d2e3f4a5b");
            let request = RequestMeta {
                id: format!("req-{i:08}-aaaaaaaaaaaaaaaa"),
                payload_digest: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
                    .into(),
                time_ms: 1_764_000_000_000 + i as i64,
            };
            let command = if i % 2 == 0 {
                Command::BeginCreate {
                    id: sandbox_id,
                    workspace: "default".into(),
                    name: format!("sandbox-{i}"),
                    spec: SandboxSpec {
                        command: vec!["sleep".into(), "infinity".into()],
                        ..SandboxSpec::default()
                    },
                    labels: BTreeMap::from([("team".into(), "a".into())]),
                    annotations: BTreeMap::new(),
                    time_ms: 1_764_000_000_000,
                    host_identity: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7v".into(),
                    request,
                }
            } else {
                Command::BeginDelete {
                    target: SandboxTarget::Id(sandbox_id.clone()),
                    expected_sandbox_id: Some(sandbox_id.clone()),
                    expected_execution: Some(ExecutionRef {
                        sandbox_id,
                        generation: 3,
                        key_id: Some(1),
                    }),
                    request,
                }
            };
            Entry::new_normal(LogId::new(3.into(), 1_000 + i), command.into())
        })
        .collect()
}

/// Mean time of `work` over `seconds`.
fn mean(seconds: f64, mut work: impl FnMut()) -> Duration {
    let started = Instant::now();
    let mut runs = 0u32;
    while started.elapsed().as_secs_f64() < seconds {
        work();
        runs += 1;
    }
    started.elapsed() / runs
}

fn main() {
    let mut seconds = 3.0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|value| value.parse().ok())
                    .filter(|value: &f64| *value > 0.0)
                    .unwrap_or_else(|| {
                        eprintln!("--seconds takes a positive number");
                        std::process::exit(2)
                    })
            }
            // cargo bench passes --bench.
            "--bench" => {}
            other => {
                eprintln!("unknown argument {other}; usage: codec [--seconds N]");
                std::process::exit(2)
            }
        }
    }
    let entries = batch();
    println!("{BATCH} log entries (BeginCreate / BeginDelete), each cell {seconds} s\n");
    println!("| encoding | encode µs | decode µs | bytes | per entry: encode + decode µs |");
    println!("|---|---|---|---|---|");
    for encoding in [Encoding::Json, Encoding::BinaryV1] {
        let encoded = palisade_codec::encode(&entries, encoding).expect("entries encode");
        let encode = mean(seconds, || {
            std::hint::black_box(palisade_codec::encode(&entries, encoding).unwrap());
        });
        let decode = mean(seconds, || {
            let decoded: Vec<Entry> = palisade_codec::decode(&encoded).unwrap();
            std::hint::black_box(decoded);
        });
        let per_entry = (encode + decode).as_secs_f64() * 1e6 / BATCH as f64;
        println!(
            "| {} | {:.1} | {:.1} | {} | {per_entry:.2} |",
            encoding.name(),
            encode.as_secs_f64() * 1e6,
            decode.as_secs_f64() * 1e6,
            encoded.len(),
        );
    }
}
