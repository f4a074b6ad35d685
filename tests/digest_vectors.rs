//! The shared digest vectors (`tests/digest_vectors.json`, computed independently of this
//! crate) agree with the Rust digest and with PostgreSQL's `outbox_payload_sha256`.

mod support;

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
struct Vectors {
    vectors: Vec<Vector>,
}

fn vectors() -> Vec<Vector> {
    let text = include_str!("digest_vectors.json");
    serde_json::from_str::<Vectors>(text)
        .expect("vectors parse")
        .vectors
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
