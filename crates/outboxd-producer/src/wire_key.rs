//! The idempotency key the provider sees, namespaced per tenant with an installation
//! secret, so that no two tenants can ever share a provider effect, reference or probe
//! answer, and no tenant can compute another tenant's key.
//!
//! `wire key = "obx2_" + hex(HMAC-SHA256(secret, "outboxd.wire-key.v2" NUL tenant NUL key))`
//! where `key` is the producer's requested key or the derived default
//! ([`crate::intent::default_idempotency_key`]). The secret is 32 random bytes created by
//! migration 0003 in `outboxd_installation` (one per database). PostgreSQL's
//! `outbox_wire_idempotency_key` computes the same value in the INSERT trigger, so every
//! INSERT path is keyed alike; `tests/it/digest_vectors.rs` pins the two together. Nothing
//! here touches the network; [`load_key_secret`] is the one read of the secret.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::intent::{IdempotencyKey, TenantId};

/// How every key the provider sees begins.
pub const WIRE_KEY_PREFIX: &str = "obx2_";

/// The per-installation secret that namespaces keys. Its `Debug` output is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct KeySecret(Vec<u8>);

impl fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeySecret(REDACTED)")
    }
}

/// Why the stored secret could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeySecretError {
    /// The database has no secret: the schema predates migration 0003.
    #[error("the database has no key secret (outboxd_installation is empty or missing); run `outboxd migrate`")]
    Missing(#[source] sqlx::Error),
    /// The stored secret is not 64 hex digits.
    #[error("the stored key secret in outboxd_installation is not 64 hex digits")]
    Malformed,
    /// PostgreSQL recorded a new intent without a namespaced key: its schema predates
    /// migration 0003. Roll the transaction back.
    #[error("the database schema predates migration 0003 (a new intent got key {key:?}, not namespaced by tenant); roll back and run `outboxd migrate` first")]
    SchemaTooOld {
        /// The key the old schema stored.
        key: String,
    },
}

impl KeySecret {
    /// Parses the stored form (64 lowercase hex digits).
    pub fn from_hex(text: &str) -> Result<Self, KeySecretError> {
        match hex::decode(text) {
            Ok(bytes) if bytes.len() == 32 => Ok(Self(bytes)),
            _ => Err(KeySecretError::Malformed),
        }
    }
}

/// The key sent to the provider for `tenant`'s intent with logical key `key`.
pub fn wire_idempotency_key(
    secret: &KeySecret,
    tenant: &TenantId,
    key: &IdempotencyKey,
) -> IdempotencyKey {
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret.0).expect("HMAC takes any key length");
    mac.update(b"outboxd.wire-key.v2\0");
    mac.update(tenant.as_str().as_bytes());
    mac.update(b"\0");
    mac.update(key.as_str().as_bytes());
    let text = format!(
        "{WIRE_KEY_PREFIX}{}",
        hex::encode(mac.finalize().into_bytes())
    );
    IdempotencyKey::parse(text).expect("69 printable ASCII characters")
}

/// Reads the installation's secret on a SQLite connection.
pub async fn load_key_secret(
    conn: &mut sqlx::SqliteConnection,
) -> Result<KeySecret, KeySecretError> {
    let text: String =
        sqlx::query_scalar("SELECT key_secret FROM outboxd_installation WHERE id = 1")
            .fetch_one(conn)
            .await
            .map_err(KeySecretError::Missing)?;
    KeySecret::from_hex(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(byte: u8) -> KeySecret {
        KeySecret(vec![byte; 32])
    }

    #[test]
    fn keys_are_namespaced_by_tenant_and_secret() {
        let key = IdempotencyKey::parse("refund-7").unwrap();
        let acme = TenantId::parse("acme").unwrap();
        let evil = TenantId::parse("evil").unwrap();
        let k = wire_idempotency_key(&secret(1), &acme, &key);
        assert_eq!(k, wire_idempotency_key(&secret(1), &acme, &key));
        assert_ne!(k, wire_idempotency_key(&secret(1), &evil, &key));
        assert_ne!(k, wire_idempotency_key(&secret(2), &acme, &key));
        // The tenant and key are separated: ("ab", "c") is not ("a", "bc").
        let ab = TenantId::parse("ab").unwrap();
        let a = TenantId::parse("a").unwrap();
        assert_ne!(
            wire_idempotency_key(&secret(1), &ab, &IdempotencyKey::parse("c").unwrap()),
            wire_idempotency_key(&secret(1), &a, &IdempotencyKey::parse("bc").unwrap())
        );
        assert!(k.as_str().starts_with("obx2_") && k.as_str().len() == 69);
    }

    #[test]
    fn secret_is_redacted_and_checked() {
        assert_eq!(format!("{:?}", secret(7)), "KeySecret(REDACTED)");
        assert!(KeySecret::from_hex(&"ab".repeat(32)).is_ok());
        assert!(KeySecret::from_hex("abcd").is_err());
        assert!(KeySecret::from_hex(&"zz".repeat(32)).is_err());
    }
}
