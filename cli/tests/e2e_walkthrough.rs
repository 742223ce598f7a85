//! End-to-end: the README walkthrough through the real binary and the real
//! process driver, including a SIGKILL restart of the gateway.

mod support;

use std::time::Duration;

use support::*;

const LEADER_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn walkthrough_with_sigkill_restart() {
    let root = tempfile::tempdir().unwrap();
    let port = free_ports(1);
    let address = format!("127.0.0.1:{port}");
    let mut replica = replica(1, &address, root.path(), &format!("1={address}"));
    replica.start().expect("start the replica");
    let endpoint = address.as_str();
    wait_for_leader(endpoint, LEADER_TIMEOUT);

    // create: READY, generation 1, a real process.
    let created = cli_json(
        endpoint,
        &["sandbox", "create", "demo", "--", "sleep", "4101"],
    );
    assert_eq!(created["phase"], "READY", "{created}");
    assert_eq!(created["generation"], 1);
    let shim = created["pid"].as_u64().expect("a pid in the handle") as u32;
    assert!(alive(shim), "the shim {shim} runs");
    assert_eq!(pids_running(&["sleep", "4101"]).len(), 1, "one sleep runs");

    // get shows id, phase, generation, resource version.
    let got = cli_json(endpoint, &["sandbox", "get", "demo"]);
    assert_eq!(got["id"], created["id"]);
    assert!(got["resource_version"].as_u64().unwrap() > 0);

    // stop: the process is gone, STOPPED.
    let stopped = cli_json(endpoint, &["sandbox", "stop", "demo"]);
    assert_eq!(stopped["phase"], "STOPPED", "{stopped}");
    assert!(
        pids_running(&["sleep", "4101"]).is_empty(),
        "stop killed the command"
    );
    eventually("the shim exits", Duration::from_secs(5), || !alive(shim));

    // start: a new process, generation 2.
    let started = cli_json(endpoint, &["sandbox", "start", "demo"]);
    assert_eq!(started["phase"], "READY", "{started}");
    assert_eq!(started["generation"], 2);
    let shim2 = started["pid"].as_u64().unwrap() as u32;
    assert_ne!(shim, shim2);
    assert_eq!(pids_running(&["sleep", "4101"]).len(), 1);

    // SIGKILL the gateway while the sandbox runs; the sandbox survives.
    replica.kill();
    assert!(alive(shim2), "the sandbox outlives its gateway");
    replica.start().expect("start the replica");
    wait_for_leader(endpoint, LEADER_TIMEOUT);
    let after = cli_json(endpoint, &["sandbox", "get", "demo"]);
    assert_eq!(after["phase"], "READY", "{after}");
    assert_eq!(after["generation"], 2, "same execution after restart");
    assert_eq!(after["execution"]["handle"], started["execution"]["handle"]);
    assert_eq!(pids_running(&["sleep", "4101"]).len(), 1, "not relaunched");

    // ...and it can still be stopped, then deleted.
    let stopped = cli_json(endpoint, &["sandbox", "stop", "demo"]);
    assert_eq!(stopped["phase"], "STOPPED");
    assert!(pids_running(&["sleep", "4101"]).is_empty());
    cli_json(endpoint, &["sandbox", "start", "demo"]);
    let deleted = cli_json(endpoint, &["sandbox", "delete", "demo"]);
    assert_eq!(deleted["deleted"], true);
    assert!(
        pids_running(&["sleep", "4101"]).is_empty(),
        "delete killed the command"
    );
    let listed = cli_json(endpoint, &["sandbox", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 0, "{listed}");
}

#[test]
fn bad_creates_fail_clearly_and_leave_nothing_behind() {
    let root = tempfile::tempdir().unwrap();
    let port = free_ports(1);
    let address = format!("127.0.0.1:{port}");
    let mut replica = replica(1, &address, root.path(), &format!("1={address}"));
    replica.start().expect("start the replica");
    let endpoint = address.as_str();
    wait_for_leader(endpoint, LEADER_TIMEOUT);

    let expect_failure = |args: &[&str], reason: &str| {
        let output = cli(endpoint, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(reason),
            "{args:?} should say {reason}: {stderr}"
        );
    };
    expect_failure(
        &["sandbox", "create", "Bad_Name", "--", "sleep", "4102"],
        "INVALID_NAME",
    );
    expect_failure(
        &["sandbox", "create", &"x".repeat(64), "--", "sleep", "4102"],
        "INVALID_NAME",
    );
    expect_failure(
        &[
            "--workspace",
            "nowhere",
            "sandbox",
            "create",
            "ok",
            "--",
            "sleep",
            "4102",
        ],
        "WORKSPACE_NOT_FOUND",
    );
    cli_json(
        endpoint,
        &["sandbox", "create", "taken", "--", "sleep", "4102"],
    );
    expect_failure(
        &["sandbox", "create", "taken", "--", "sleep", "4102"],
        "NAME_TAKEN",
    );
    // A command that does not exist: the sandbox settles in ERROR, exit 1.
    let output = cli(
        endpoint,
        &[
            "sandbox",
            "create",
            "missing-program",
            "--",
            "/no/such/program",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("ERROR"));

    let listed = cli_json(endpoint, &["sandbox", "list"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|sandbox| sandbox["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["missing-program", "taken"],
        "nothing else was created"
    );
    assert_eq!(
        pids_running(&["sleep", "4102"]).len(),
        1,
        "only `taken` runs"
    );
    cli_json(endpoint, &["sandbox", "delete", "taken"]);
    cli_json(endpoint, &["sandbox", "delete", "missing-program"]);
    assert!(pids_running(&["sleep", "4102"]).is_empty());
}

#[test]
fn workspaces_through_the_cli() {
    let root = tempfile::tempdir().unwrap();
    let port = free_ports(1);
    let address = format!("127.0.0.1:{port}");
    let mut replica = replica(1, &address, root.path(), &format!("1={address}"));
    replica.start().expect("start the replica");
    let endpoint = address.as_str();
    wait_for_leader(endpoint, LEADER_TIMEOUT);

    cli_json(endpoint, &["workspace", "create", "team"]);
    cli_json(
        endpoint,
        &[
            "--workspace",
            "team",
            "sandbox",
            "create",
            "w1",
            "--",
            "sleep",
            "4103",
        ],
    );
    let output = cli(endpoint, &["workspace", "delete", "team"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("WORKSPACE_NOT_EMPTY"));
    cli_json(
        endpoint,
        &["--workspace", "team", "sandbox", "delete", "w1"],
    );
    cli_json(endpoint, &["workspace", "delete", "team"]);
    let output = cli(endpoint, &["workspace", "delete", "default"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("DEFAULT_WORKSPACE_PROTECTED"));
    let workspaces = cli_json(endpoint, &["workspace", "list"]);
    assert_eq!(workspaces.as_array().unwrap().len(), 1);
}
