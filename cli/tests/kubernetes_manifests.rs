//! The Kubernetes manifests of `deploy/kubernetes/` validated offline
//! against the pinned Kubernetes v1.37 JSON schemas (strict: unknown
//! fields are errors) by `scripts/validate-kubernetes` (Python jsonschema
//! in a virtualenv it makes from PyPI): the shipped manifests pass, the PKI
//! Secret `make-pki-secret` prints (with this build's `init-pki`) passes,
//! and a manifest with a misspelled field or a wrong type fails, naming it.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn validate(target: &Path) -> Output {
    Command::new(repo_root().join("scripts/validate-kubernetes"))
        .arg(target)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/validate-kubernetes")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn manifest(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("deploy/kubernetes").join(name)).unwrap()
}

#[test]
fn the_shipped_manifests_and_the_pki_secret_validate_and_broken_ones_do_not() {
    // The shipped manifests: every object checked, none wrong.
    let output = validate(&repo_root().join("deploy/kubernetes"));
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        text(&output).contains("6 object(s) in 5 file(s)"),
        "{}",
        text(&output)
    );

    // What the issue asks of them (the schema says they are well formed,
    // not that they are these objects).
    let statefulset = manifest("statefulset.yaml");
    for wanted in [
        "kind: StatefulSet",
        "replicas: 3",
        "serviceName: palisade-peers",
        "volumeClaimTemplates:",
        "secretName: palisade-pki",
        "readinessProbe:",
        "\"health\"",
    ] {
        assert!(
            statefulset.contains(wanted),
            "statefulset.yaml lacks {wanted}"
        );
    }
    let services = manifest("services.yaml");
    assert!(services.contains("clusterIP: None"), "a headless Service");
    assert!(services.contains("name: palisade\n"), "a client Service");
    let budget = manifest("poddisruptionbudget.yaml");
    assert!(budget.contains("maxUnavailable: 1"), "{budget}");

    // The PKI Secret, made with this build's init-pki.
    let work = tempfile::tempdir().unwrap();
    let secret = Command::new(repo_root().join("deploy/kubernetes/make-pki-secret"))
        .args(["--namespace", "palisade-test", "--dir"])
        .arg(work.path().join("pki"))
        .arg("--palisade")
        .arg(support::palisade())
        .stdin(Stdio::null())
        .output()
        .expect("run make-pki-secret");
    assert!(secret.status.success(), "{}", text(&secret));
    let secret_yaml = String::from_utf8(secret.stdout.clone()).unwrap();
    for key in ["ca.pem:", "node-1.pem:", "node-2-key.pem:", "node-3.pem:"] {
        assert!(secret_yaml.contains(key), "the Secret lacks {key}");
    }
    assert!(
        !secret_yaml.contains("ca-key.pem") && !secret_yaml.contains("admin"),
        "the CA key and the admin credential stay out of the cluster"
    );
    let secret_file = work.path().join("secret-pki.yaml");
    std::fs::write(&secret_file, &secret_yaml).unwrap();
    let output = validate(&secret_file);
    assert!(output.status.success(), "{}", text(&output));

    // A misspelled field fails, naming it.
    let misspelled = statefulset.replace(
        "      terminationGracePeriodSeconds: 40\n",
        "      terminationGracePeriodSeconds: 40\n      restartPolcy: Always\n",
    );
    assert_ne!(misspelled, statefulset, "the planted field went in");
    let bad = work.path().join("misspelled.yaml");
    std::fs::write(&bad, misspelled).unwrap();
    let output = validate(&bad);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains("spec.template.spec")
            && text(&output).contains("'restartPolcy' was unexpected"),
        "{}",
        text(&output)
    );

    // A wrong type fails too.
    let wrong_type = budget.replace("maxUnavailable: 1", "maxUnavailable: [1]");
    let bad = work.path().join("wrong-type.yaml");
    std::fs::write(&bad, wrong_type).unwrap();
    let output = validate(&bad);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains("spec.maxUnavailable"),
        "{}",
        text(&output)
    );
}
