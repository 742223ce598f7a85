//! `palisade chaos run` fails a vacuous campaign: a requested nemesis that
//! never fired (a partition of a single replica has no link to cut) makes
//! it exit 3 and name the nemesis, although no anomaly was found (issue 15).
//! A nemesis that cannot fire at all in the campaign asked for — `postgres`
//! without `--postgres` — is refused before anything runs (exit 2), with
//! the fix; so is `--postgres` where no PostgreSQL runs (`--mode process`).

use std::process::Command;

/// Runs `palisade chaos run ARGS`: its exit code, stdout and stderr.
fn chaos_run(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["chaos", "run"])
        .args(args)
        .output()
        .expect("palisade runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_campaign_whose_nemesis_cannot_fire_exits_non_zero_and_names_it() {
    let (status, stdout, stderr) = chaos_run(&[
        "--seed",
        "5",
        "--ops",
        "120",
        "--replicas",
        "1",
        "--nemesis",
        "partition,kill",
    ]);
    assert_eq!(
        status,
        Some(3),
        "a vacuous campaign exits 3\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("VACUOUS: requested nemesis never fired: partition"),
        "the report names the nemesis\nstdout:\n{stdout}"
    );
    assert!(
        stderr.contains("requested nemesis never fired: partition"),
        "stderr names it too\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("anomalies: none"), "{stdout}");
}

#[test]
fn the_postgres_nemesis_without_postgres_is_refused_with_the_fix() {
    let (status, stdout, stderr) =
        chaos_run(&["--seed", "5", "--ops", "10", "--nemesis", "kill,postgres"]);
    assert_eq!(
        status,
        Some(2),
        "refused before the campaign\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("the nemesis postgres") && stderr.contains("add --postgres"),
        "the error names the nemesis and the fix\nstderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("palisade chaos: seed"),
        "no campaign started\nstderr:\n{stderr}"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["chaos", "run", "--help"])
        .output()
        .expect("palisade runs");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("postgres (needs --postgres"),
        "--help lists the nemesis\n{help}"
    );
}

#[test]
fn postgres_in_process_mode_is_refused_not_ignored() {
    let (status, stdout, stderr) = chaos_run(&[
        "--mode",
        "process",
        "--postgres",
        "--seed",
        "5",
        "--ops",
        "10",
    ]);
    assert_eq!(
        status,
        Some(2),
        "refused before the campaign\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("--mode process runs without PostgreSQL")
            && stderr.contains("drop --postgres"),
        "the error says why and the fix\nstderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("palisade chaos: seed"),
        "no campaign started\nstderr:\n{stderr}"
    );
}
