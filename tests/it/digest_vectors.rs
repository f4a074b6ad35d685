//! The shared vectors (`tests/it/digest_vectors.json`, computed independently of this crate
//! by `scripts/digest-vectors.py`) agree with the Rust digest and with PostgreSQL's
//! `outbox_payload_sha256`, and the key the provider sees agrees between Rust
//! (`outboxd::wire_key`) and PostgreSQL's `outbox_wire_idempotency_key`.

use crate::support;

use outboxd::digest::{canonical_payload, payload_digest};
use outboxd::intent::ActionName;
use outboxd::store::Database;
use serde::Deserialize;
use support::TestDb;

#[derive(Deserialize)]
struct Vector {
    action: String,
    payload_version: i32,
    payload_json: String,
    canonical_payload: String,
    sha256: String,
}

#[derive(Deserialize)]
struct KeyVector {
    key_secret: String,
    tenant: String,
    key: String,
    wire_key: String,
}

#[derive(Deserialize)]
struct Vectors {
    vectors: Vec<Vector>,
    wire_keys: Vec<KeyVector>,
}

fn all() -> Vectors {
    serde_json::from_str::<Vectors>(include_str!("digest_vectors.json")).expect("vectors parse")
}

fn vectors() -> Vec<Vector> {
    all().vectors
}

#[test]
fn rust_wire_key_matches_vectors() {
    use outboxd::wire_key::{wire_idempotency_key, KeySecret};
    for v in all().wire_keys {
        let secret = KeySecret::from_hex(&v.key_secret).unwrap();
        let wire = wire_idempotency_key(
            &secret,
            &v.tenant.clone().try_into().unwrap(),
            &v.key.clone().try_into().unwrap(),
        );
        assert_eq!(wire.as_str(), v.wire_key, "{} {}", v.tenant, v.key);
    }
}

#[tokio::test]
async fn postgres_wire_key_matches_vectors() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    for v in all().wire_keys {
        sqlx::query("UPDATE outboxd_installation SET key_secret = $1")
            .bind(&v.key_secret)
            .execute(pool)
            .await
            .unwrap();
        let wire: String = sqlx::query_scalar("SELECT outbox_wire_idempotency_key($1, $2)")
            .bind(&v.tenant)
            .bind(&v.key)
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(wire, v.wire_key, "{} {}", v.tenant, v.key);
    }
}

#[test]
fn rust_digest_matches_vectors() {
    for v in vectors() {
        let payload: serde_json::Value = serde_json::from_str(&v.payload_json).unwrap();
        let action = ActionName::parse(v.action.clone()).unwrap();
        assert_eq!(
            canonical_payload(&payload).unwrap(),
            v.canonical_payload,
            "{}",
            v.payload_json
        );
        let digest = payload_digest(&action, v.payload_version, &payload).unwrap();
        assert_eq!(digest.as_str(), v.sha256, "{}", v.payload_json);
    }
}

#[tokio::test]
async fn postgres_digest_matches_vectors() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    for v in vectors() {
        let (canonical, digest): (String, String) = sqlx::query_as(
            "SELECT outbox_canonical_json($1::text::jsonb), outbox_payload_sha256($2, $3, $1::text::jsonb)",
        )
        .bind(&v.payload_json)
        .bind(&v.action)
        .bind(v.payload_version)
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(canonical, v.canonical_payload, "{}", v.payload_json);
        assert_eq!(digest, v.sha256, "{}", v.payload_json);
    }
}

/// PostgreSQL's wire key agrees with Rust's for secrets beyond the shared vectors: 64
/// secrets drawn from SHA-256 of a counter (so words with the high bit set, which the SQL
/// function's 64-bit XORs see as negative numbers, come up in about half of them), each
/// with tenants and keys of ASCII, non-ASCII and the longest allowed lengths.
#[tokio::test]
async fn postgres_wire_key_matches_rust_for_drawn_secrets() {
    use outboxd::intent::{IdempotencyKey, TenantId};
    use outboxd::wire_key::{wire_idempotency_key, KeySecret};
    use sha2::{Digest, Sha256};

    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let inputs = [
        ("acme".to_string(), "k".to_string()),
        ("tenant é".to_string(), "key with spaces ~".to_string()),
        ("t".repeat(128), "k".repeat(255)),
        ("日本".to_string(), "obx1_00ff".to_string()),
    ];
    let mut high_bit_words = 0;
    for i in 0u32..64 {
        let secret_hex = hex::encode(Sha256::digest(i.to_be_bytes()));
        high_bit_words += (0..4)
            .filter(|w| u8::from_str_radix(&secret_hex[w * 16..w * 16 + 1], 16).unwrap() >= 8)
            .count();
        let secret = KeySecret::from_hex(&secret_hex).unwrap();
        sqlx::query("UPDATE outboxd_installation SET key_secret = $1")
            .bind(&secret_hex)
            .execute(pool)
            .await
            .unwrap();
        for (tenant, key) in &inputs {
            let sql: String = sqlx::query_scalar("SELECT outbox_wire_idempotency_key($1, $2)")
                .bind(tenant)
                .bind(key)
                .fetch_one(pool)
                .await
                .unwrap();
            let rust = wire_idempotency_key(
                &secret,
                &TenantId::parse(tenant.clone()).unwrap(),
                &IdempotencyKey::parse(key.clone()).unwrap(),
            );
            assert_eq!(
                sql,
                rust.as_str(),
                "secret {secret_hex}, {tenant:?}, {key:?}"
            );
        }
    }
    assert!(
        high_bit_words > 64,
        "{high_bit_words} of 256 words had the high bit set"
    );
}
