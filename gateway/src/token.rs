//! Execution tokens: opaque strings that attest "sandbox S, generation G"
//! with an HMAC-SHA256 under the cluster's key (which lives in the
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
//!
//! Key rotation (`cluster rotate-token-key`): tokens are minted with the
//! current key only; a token verifies under the current key or under a
//! retired key whose deadline the replicated clock has not reached
//! ([`ClusterIdentity::verifying_keys`]). The token does not name its key:
//! trying the few keys (at most
//! [`RETIRED_TOKEN_KEYS_COUNT_MAX`](palisade_lifecycle::limits::RETIRED_TOKEN_KEYS_COUNT_MAX)
//! plus one) keeps every token ever handed out in the same format.

use hmac::{Hmac, Mac};
use palisade_lifecycle::{ClusterIdentity, ExecutionRef};
use sha2::Sha256;
use tonic::Code;

use crate::errors;

/// The ErrorInfo reason of a token that cannot be verified.
pub const UNVERIFIABLE_EXECUTION_TOKEN: &str = "UNVERIFIABLE_EXECUTION_TOKEN";
/// The ErrorInfo reason (UNAVAILABLE) of a token this replica cannot
/// verify yet: it has no cluster identity (joined empty, catching up).
pub const CATCHING_UP: &str = "CATCHING_UP";
const PREFIX: &str = "pet1";
/// Longest token accepted (a UUID, a u64 and a 64-char MAC fit easily).
pub const TOKEN_LENGTH_MAX: usize = 256;

/// The MAC of (token domain, sandbox, generation) under `key_hex`; `None`
/// for a key that is not hex. The domain is the cluster id, or the id of
/// the cluster a restored one carried its key from (`token_domain`).
fn keyed_mac(
    key_hex: &str,
    token_domain: &str,
    sandbox_id: &str,
    generation: u64,
) -> Option<Hmac<Sha256>> {
    let secret = hex::decode(key_hex).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret).ok()?;
    mac.update(token_domain.as_bytes());
    mac.update(b"\0");
    mac.update(sandbox_id.as_bytes());
    mac.update(b"\0");
    mac.update(&generation.to_be_bytes());
    Some(mac)
}

/// The token of (sandbox, generation) under the current key, or empty
/// while the cluster has no identity yet (the first leader chooses it
/// right after election).
pub fn mint(cluster: Option<&ClusterIdentity>, sandbox_id: &str, generation: u64) -> String {
    let mac = cluster.and_then(|cluster| {
        keyed_mac(
            &cluster.token_secret_hex,
            cluster.token_domain(),
            sandbox_id,
            generation,
        )
    });
    match mac {
        Some(mac) => format!(
            "{PREFIX}.{sandbox_id}.{generation}.{}",
            hex::encode(mac.finalize().into_bytes())
        ),
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

/// Verifies a token against the keys that verify when the replicated
/// clock reads `clock_ms` (the current one, retired ones before their
/// deadline) and returns the execution it attests.
pub fn verify(
    cluster: Option<&ClusterIdentity>,
    clock_ms: i64,
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
        // This replica has not applied the cluster identity yet (it joined
        // empty and is catching up): it cannot tell, which is not a
        // refusal — another replica, or this one a moment later, can.
        return Err(errors::unavailable(
            CATCHING_UP,
            "this replica has not received the cluster's token key yet (it is joining or catching up); retry, or ask another replica",
        ));
    };
    let given = hex::decode(mac_hex).map_err(|_| unverifiable("it is malformed"))?;
    let mut usable_keys = 0;
    for (key_id, key_hex) in cluster.verifying_keys(clock_ms) {
        let Some(check) = keyed_mac(key_hex, cluster.token_domain(), sandbox_id, generation) else {
            continue;
        };
        usable_keys += 1;
        // Constant-time comparison.
        if check.verify_slice(&given).is_ok() {
            return Ok(ExecutionRef {
                sandbox_id: sandbox_id.to_string(),
                generation,
                key_id: Some(key_id),
            });
        }
    }
    if usable_keys == 0 {
        return Err(unverifiable("the cluster secret is unreadable"));
    }
    Err(unverifiable(
        "it was not issued by this cluster, was altered, or its key was rotated out",
    ))
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
            token_key_id: 1,
            retired_token_keys: Vec::new(),
        }
    }

    #[test]
    fn round_trip() {
        let c = cluster(&"ab".repeat(32));
        let token = mint(Some(&c), "sandbox-1", 7);
        let execution = verify(Some(&c), 0, &token).unwrap();
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
            let status = verify(Some(&c), 0, bad).unwrap_err();
            assert_eq!(status.code(), Code::FailedPrecondition, "{bad}");
            assert_eq!(
                errors::reason_of(&status).as_deref(),
                Some(UNVERIFIABLE_EXECUTION_TOKEN)
            );
        }
        let not_yet = verify(None, 0, &token).unwrap_err();
        assert_eq!(
            (not_yet.code(), errors::reason_of(&not_yet).as_deref()),
            (Code::Unavailable, Some(CATCHING_UP)),
            "no secret yet: not a refusal, a retry"
        );
    }

    #[test]
    fn a_retired_key_verifies_until_its_deadline_and_new_tokens_use_the_current_key() {
        let mut c = cluster(&"ab".repeat(32));
        let old = mint(Some(&c), "sandbox-1", 7);
        c.retired_token_keys
            .push(palisade_lifecycle::RetiredTokenKey {
                key_id: 1,
                secret_hex: std::mem::replace(&mut c.token_secret_hex, "cd".repeat(32)),
                valid_until_ms: 5_000,
            });
        c.token_key_id = 2;
        let new = mint(Some(&c), "sandbox-1", 7);
        assert_ne!(
            new, old,
            "a token minted after the rotation uses the new key"
        );
        assert_eq!(verify(Some(&c), 4_999, &old).unwrap().generation, 7);
        assert_eq!(verify(Some(&c), 4_999, &new).unwrap().generation, 7);
        let refused = verify(Some(&c), 5_000, &old).unwrap_err();
        assert_eq!(
            errors::reason_of(&refused).as_deref(),
            Some(UNVERIFIABLE_EXECUTION_TOKEN)
        );
        assert!(verify(Some(&c), 5_000, &new).is_ok());
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
        assert_eq!(verify(Some(&restored), 0, &token).unwrap().generation, 7);
        let unbound = ClusterIdentity {
            cluster_id: "c2".into(),
            ..source
        };
        assert!(verify(Some(&unbound), 0, &token).is_err());
    }
}
