//! The systemd units in `deploy/systemd/` pass `systemd-analyze verify`
//! (ExecStart pointed at the binary under test, so the command line is
//! checked against a real executable), carry the hardening the
//! walkthrough promises (User=, StateDirectory=, ProtectSystem=,
//! NoNewPrivileges=, a restart policy), and stay under an exposure level
//! of 5.0 in `systemd-analyze security --offline`. A unit with a
//! misspelled directive is caught by the same check, so the check can fail.
//!
//! `systemd-analyze` must be installed (`./scripts/ensure-systemd-analyze`,
//! run by `./scripts/test`): without it this test fails, it never skips.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The highest `systemd-analyze security` exposure accepted (0 safest, 10
/// unconfined; 5 and above is "MEDIUM" or worse).
const EXPOSURE_MAX: &str = "5.0";
/// The same, as `--threshold` takes it (tenths: 50 is 5.0).
const EXPOSURE_THRESHOLD: u32 = 50;

fn units_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd")
}

fn analyzer() -> PathBuf {
    let output = Command::new("sh")
        .args(["-c", "command -v systemd-analyze"])
        .output()
        .expect("run sh");
    let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(
        output.status.success() && !path.is_empty(),
        "systemd-analyze is not installed: run ./scripts/ensure-systemd-analyze \
         (apt-get install systemd); this test does not skip"
    );
    PathBuf::from(path)
}

/// Copies every unit into `dir` as systemd would load it (a template as
/// its instance `@1`), with ExecStart pointing at the binary under test.
fn installed_units(dir: &Path) -> Vec<PathBuf> {
    let mut units = Vec::new();
    for entry in std::fs::read_dir(units_dir()).expect("deploy/systemd exists") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|ext| ext.to_str()) != Some("service") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let instance = name.replace("@.service", "@1.service");
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text.replace(
            "/usr/local/bin/palisade",
            support::palisade().to_str().unwrap(),
        );
        let installed = dir.join(instance);
        std::fs::write(&installed, text).unwrap();
        units.push(installed);
    }
    units.sort();
    units
}

/// `systemd-analyze verify` on `units`: the problems it reports about
/// them (it exits 0 on warnings such as an unknown directive, so every
/// line naming one of the units counts).
fn verify_problems(analyzer: &Path, units: &[PathBuf]) -> Vec<String> {
    let output = Command::new(analyzer)
        .arg("verify")
        .args(units)
        .output()
        .expect("run systemd-analyze verify");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let names: Vec<String> = units
        .iter()
        .map(|unit| unit.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    let mut problems: Vec<String> = text
        .lines()
        .filter(|line| names.iter().any(|name| line.contains(name.as_str())))
        .map(str::to_string)
        .collect();
    if !output.status.success() {
        problems.push(format!("exit status {}: {text}", output.status));
    }
    problems
}

#[test]
fn the_systemd_units_verify_and_are_hardened() {
    let analyzer = analyzer();
    let dir = tempfile::tempdir().unwrap();
    let units = installed_units(dir.path());
    let names: Vec<String> = units
        .iter()
        .map(|unit| unit.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    assert_eq!(
        names,
        ["palisade-docker.service", "palisade@1.service"],
        "the units deploy/README.md describes"
    );

    let problems = verify_problems(&analyzer, &units);
    assert!(problems.is_empty(), "systemd-analyze verify: {problems:#?}");

    for unit in &units {
        let text = std::fs::read_to_string(unit).unwrap();
        for directive in [
            "User=",
            "StateDirectory=",
            "ProtectSystem=strict",
            "NoNewPrivileges=yes",
            "Restart=on-failure",
            "KillSignal=SIGTERM",
            "--ca /etc/palisade/pki/ca.pem",
        ] {
            assert!(
                text.lines().any(
                    |line| line.trim_start().starts_with(directive) || line.contains(directive)
                ),
                "{}: no {directive}",
                unit.display()
            );
        }
        let security = Command::new(&analyzer)
            .args(["security", "--offline=yes"])
            .arg(format!("--threshold={EXPOSURE_THRESHOLD}"))
            .arg(unit)
            .output()
            .expect("run systemd-analyze security");
        let report = String::from_utf8_lossy(&security.stdout);
        assert!(
            security.status.success(),
            "{}: exposure above {EXPOSURE_MAX}:\n{report}\n{}",
            unit.display(),
            String::from_utf8_lossy(&security.stderr)
        );
    }
    // The process-driver template shares the executions directory and
    // keeps shims alive across a gateway restart.
    let template = std::fs::read_to_string(units_dir().join("palisade@.service")).unwrap();
    assert!(template.contains("--driver-dir /var/lib/palisade/executions"));
    assert!(template.contains("KillMode=process"));
    assert!(template.contains("--sandbox-user nobody"));

    // The check can fail: a misspelled directive is reported.
    let broken = dir.path().join("palisade-broken.service");
    let text = std::fs::read_to_string(&units[0])
        .unwrap()
        .replace("NoNewPrivileges=yes", "NoNewPrivilege=yes");
    std::fs::write(&broken, text).unwrap();
    let problems = verify_problems(&analyzer, std::slice::from_ref(&broken));
    assert!(
        problems
            .iter()
            .any(|problem| problem.contains("NoNewPrivilege")),
        "a misspelled directive went unnoticed: {problems:#?}"
    );
}
