//! Standard Webhooks request signing (<https://www.standardwebhooks.com/>).
//!
//! Each signed request carries three headers: `webhook-id` (our idempotency key, so it is
//! stable across retries and the receiver can deduplicate by it), `webhook-timestamp` (unix
//! seconds at send time) and `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `"{id}.{timestamp}.{body}"`. Secrets are written `whsec_<base64>`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Header carrying the message id (our idempotency key).
pub const WEBHOOK_ID_HEADER: &str = "webhook-id";
/// Header carrying the signing time, in unix seconds.
pub const WEBHOOK_TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Header carrying the `v1,<base64>` signature.
pub const WEBHOOK_SIGNATURE_HEADER: &str = "webhook-signature";

/// Prefix of a Standard Webhooks secret.
const SECRET_PREFIX: &str = "whsec_";

/// Why a configured signing secret could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SigningSecretError {
    /// Nothing after the optional `whsec_` prefix.
    #[error("the signing secret is empty (expected whsec_<base64>)")]
    Empty,
    /// The part after the prefix is not standard base64.
    #[error("the signing secret is not valid base64 after the whsec_ prefix")]
    NotBase64(#[source] base64::DecodeError),
}

/// Decodes a `whsec_<base64>` secret into key bytes. The prefix is optional, as in the
/// reference implementations; the receiver chooses the secret, so any length is accepted.
pub fn parse_signing_secret(secret: &str) -> Result<Vec<u8>, SigningSecretError> {
    let encoded = secret.trim();
    let encoded = encoded.strip_prefix(SECRET_PREFIX).unwrap_or(encoded);
    if encoded.is_empty() {
        return Err(SigningSecretError::Empty);
    }
    let key = BASE64
        .decode(encoded)
        .map_err(SigningSecretError::NotBase64)?;
    if key.is_empty() {
        return Err(SigningSecretError::Empty);
    }
    Ok(key)
}

/// The `webhook-signature` value for one message: `v1,<base64(HMAC-SHA256(secret,
/// "{id}.{timestamp}.{body}"))>`.
pub fn sign(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
        .expect("HMAC-SHA256 accepts keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published test vector of the Standard Webhooks reference libraries.
    #[test]
    fn matches_the_reference_vector() {
        let key = parse_signing_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn matches_an_independent_computation() {
        let key = b"0123456789abcdef0123456789abcdef".to_vec();
        let secret = format!("whsec_{}", BASE64.encode(&key));
        assert_eq!(parse_signing_secret(&secret).unwrap(), key);

        let body = br#"{"amount":1200,"currency":"EUR"}"#;
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
        mac.update(b"op-42:refund.1700000000.");
        mac.update(body);
        let expected = BASE64.encode(mac.finalize().into_bytes());

        let signature = sign(&key, "op-42:refund", 1_700_000_000, body);
        let encoded = signature.strip_prefix("v1,").expect("v1 scheme");
        assert_eq!(encoded, expected);
        assert_eq!(BASE64.decode(encoded).unwrap().len(), 32);
    }

    #[test]
    fn secret_parsing_errors_are_clear() {
        assert!(matches!(
            parse_signing_secret("whsec_"),
            Err(SigningSecretError::Empty)
        ));
        assert!(matches!(
            parse_signing_secret(""),
            Err(SigningSecretError::Empty)
        ));
        let bad = parse_signing_secret("whsec_not base64!").unwrap_err();
        assert!(matches!(bad, SigningSecretError::NotBase64(_)));
        assert!(std::error::Error::source(&bad).is_some());
        assert!(bad.to_string().contains("not valid base64"));
        // The prefix is optional, as in the reference implementations.
        assert_eq!(parse_signing_secret("AAEC").unwrap(), vec![0, 1, 2]);
    }
}
