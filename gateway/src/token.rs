//! Execution tokens: opaque strings that attest "sandbox S, generation G"
//! with an HMAC-SHA256 under the cluster's secret (which lives in the
//! replicated state, so every replica mints and verifies the same tokens,
//! across snapshots and restarts), bound to the cluster's token domain
//! (its cluster id, or — for a cluster restored from a backup that kept the
//! token key — the source cluster's domain, so tokens survive the restore:
//! `palisade cluster restore`).
//!
//! Format: `pet1.<sandbox id>.<generation>.<hex MAC>` — opaque to clients,
//! readable to operators. A token that does not parse, names another
//! cluster, or carries a wrong MAC is refused with
//! FAILED_PRECONDITION UNVERIFIABLE_EXECUTION_TOKEN: it is never treated as
//! "no condition".

use hmac::{Hmac, Mac};
use palisade_lifecycle::{ClusterIdentity, ExecutionRef};
use sha2::Sha256;
use tonic::Code;

use crate::errors;

/// The ErrorInfo reason of a token that cannot be verified.
pub const UNVERIFIABLE_EXECUTION_TOKEN: &str = "UNVERIFIABLE_EXECUTION_TOKEN";
const PREFIX: &str = "pet1";
/// Longest token accepted (a UUID, a u64 and a 64-char MAC fit easily).
pub const TOKEN_LENGTH_MAX: usize = 256;

fn mac(cluster: &ClusterIdentity, sandbox_id: &str, generation: u64) -> Option<Vec<u8>> {
    let secret = hex::decode(&cluster.token_secret_hex).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret).ok()?;
    mac.update(cluster.token_domain().as_bytes());
    mac.update(b"\0");
    mac.update(sandbox_id.as_bytes());
    mac.update(b"\0");
    mac.update(&generation.to_be_bytes());
    Some(mac.finalize().into_bytes().to_vec())
}

/// The token of (sandbox, generation), or empty while the cluster has no
/// identity yet (the first leader chooses it right after election).
pub fn mint(cluster: Option<&ClusterIdentity>, sandbox_id: &str, generation: u64) -> String {
    match cluster.and_then(|cluster| mac(cluster, sandbox_id, generation)) {
        Some(mac) => format!("{PREFIX}.{sandbox_id}.{generation}.{}", hex::encode(mac)),
        None => String::new(),
    }
}

fn unverifiable(why: &str) -> tonic::Status {
    errors::status(
        Code::FailedPrecondition,
        UNVERIFIABLE_EXECUTION_TOKEN,
        format!(
            "the execution token cannot be verified: {why}; observe the sandbox (get, list or watch) for a valid token"
        ),
        [],
    )
}

/// Verifies a token and returns the execution it attests.
pub fn verify(
    cluster: Option<&ClusterIdentity>,
    token: &str,
) -> Result<ExecutionRef, tonic::Status> {
    if token.len() > TOKEN_LENGTH_MAX {
        return Err(unverifiable("it is too long"));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [prefix, sandbox_id, generation, mac_hex] = parts.as_slice() else {
        return Err(unverifiable("it is malformed or truncated"));
    };
    if *prefix != PREFIX || sandbox_id.is_empty() {
        return Err(unverifiable("it is not a Palisade execution token"));
    }
    let generation: u64 = generation
        .parse()
        .map_err(|_| unverifiable("it is malformed"))?;
    let Some(cluster) = cluster else {
        return Err(unverifiable("this cluster has no token secret yet"));
    };
    let given = hex::decode(mac_hex).map_err(|_| unverifiable("it is malformed"))?;
    let secret = hex::decode(&cluster.token_secret_hex)
        .map_err(|_| unverifiable("the cluster secret is unreadable"))?;
    let mut check = Hmac::<Sha256>::new_from_slice(&secret)
        .map_err(|_| unverifiable("the cluster secret is unusable"))?;
    check.update(cluster.token_domain().as_bytes());
    check.update(b"\0");
    check.update(sandbox_id.as_bytes());
    check.update(b"\0");
    check.update(&generation.to_be_bytes());
    // Constant-time comparison.
    check
        .verify_slice(&given)
        .map_err(|_| unverifiable("it was not issued by this cluster or was altered"))?;
    Ok(ExecutionRef {
        sandbox_id: sandbox_id.to_string(),
        generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(secret: &str) -> ClusterIdentity {
        ClusterIdentity {
            cluster_id: "c1".into(),
            token_secret_hex: secret.into(),
            token_domain: String::new(),
            driver_identity: String::new(),
        }
    }

    #[test]
    fn round_trip() {
        let c = cluster(&"ab".repeat(32));
        let token = mint(Some(&c), "sandbox-1", 7);
        let execution = verify(Some(&c), &token).unwrap();
        assert_eq!(execution.sandbox_id, "sandbox-1");
        assert_eq!(execution.generation, 7);
    }

    #[test]
    fn forged_truncated_and_foreign_tokens_are_unverifiable() {
        let c = cluster(&"ab".repeat(32));
        let other = cluster(&"cd".repeat(32));
        let token = mint(Some(&c), "sandbox-1", 7);
        let forged = token.replace(".7.", ".8.");
        let truncated = &token[..token.len() - 4];
        for bad in [
            forged.as_str(),
            truncated,
            "",
            "garbage",
            "pet1.x.1.zz",
            &mint(Some(&other), "sandbox-1", 7),
        ] {
            let status = verify(Some(&c), bad).unwrap_err();
            assert_eq!(status.code(), Code::FailedPrecondition, "{bad}");
            assert_eq!(
                errors::reason_of(&status).as_deref(),
                Some(UNVERIFIABLE_EXECUTION_TOKEN)
            );
        }
        assert!(verify(None, &token).is_err(), "no secret, no verification");
    }

    /// A restored cluster that kept the token key has a new cluster id but
    /// the source's token domain: the source's tokens verify; a cluster
    /// with the same secret but its own domain does not accept them.
    #[test]
    fn a_kept_token_domain_verifies_the_sources_tokens_under_a_new_cluster_id() {
        let source = cluster(&"ab".repeat(32));
        let token = mint(Some(&source), "sandbox-1", 7);
        let restored = ClusterIdentity {
            cluster_id: "c2".into(),
            token_domain: "c1".into(),
            ..source.clone()
        };
        assert_eq!(verify(Some(&restored), &token).unwrap().generation, 7);
        let unbound = ClusterIdentity {
            cluster_id: "c2".into(),
            ..source
        };
        assert!(verify(Some(&unbound), &token).is_err());
    }
}
