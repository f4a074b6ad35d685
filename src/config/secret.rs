//! Secrets in configuration: the [`Secret`] newtype that never prints its contents, and
//! small helpers to keep credentials out of logs (URL password redaction, a heuristic for
//! literal values that look like credentials).

use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

/// What every secret prints as, in `Debug`, `Display` and serialized output.
pub const REDACTED: &str = "[REDACTED]";

/// A credential read from the configuration file, an environment variable or a file.
///
/// `Debug`, `Display` and `Serialize` all print `"[REDACTED]"`; only [`Secret::expose`]
/// gives the value. Equality is a plain string comparison (not constant-time): use
/// `subtle` when comparing a presented credential against a configured one.
#[derive(Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{REDACTED:?}")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

/// Replaces the passwords in a database URL with `[REDACTED]`: the userinfo password
/// (`scheme://user:password@host/...`) and `password=` / `sslpassword=` query parameters.
/// Works on the raw text, so it also covers URLs that do not parse.
pub fn redact_url_password(url: &str) -> String {
    redact_query_password(&redact_userinfo(url))
}

/// Whether `url` carries a password, in its userinfo or its query.
pub fn url_has_password(url: &str) -> bool {
    redact_url_password(url) != url
}

fn redact_userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let Some(colon) = authority[..at].find(':') else {
        return url.to_owned();
    };
    let password_start = authority_start + colon + 1;
    let password_end = authority_start + at;
    format!(
        "{}{REDACTED}{}",
        &url[..password_start],
        &url[password_end..]
    )
}

fn redact_query_password(url: &str) -> String {
    let Some(mark) = url.find('?') else {
        return url.to_owned();
    };
    let (base, query) = url.split_at(mark + 1);
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _))
                if name.eq_ignore_ascii_case("password")
                    || name.eq_ignore_ascii_case("sslpassword") =>
            {
                format!("{name}={REDACTED}")
            }
            _ => param.to_owned(),
        })
        .collect();
    format!("{base}{}{fragment}", params.join("&"))
}

/// Serializes a URL with its password redacted (for `#[serde(serialize_with)]`).
pub(crate) fn serialize_redacted_url<S: Serializer>(
    url: &str,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redact_url_password(url))
}

/// Whether a literal header value (under header `name`) looks like a credential that
/// belongs in an environment variable or a file rather than in the configuration file.
pub fn looks_like_secret(name: &str, value: &str) -> bool {
    const SECRET_NAMES: [&str; 8] = [
        "auth",
        "token",
        "key",
        "secret",
        "password",
        "cookie",
        "signature",
        "credential",
    ];
    const SECRET_PREFIXES: [&str; 6] = ["bearer ", "basic ", "token ", "sk_", "whsec_", "ghp_"];
    let name = name.to_ascii_lowercase();
    let lower = value.to_ascii_lowercase();
    if SECRET_NAMES.iter().any(|n| name.contains(n)) {
        return true;
    }
    if SECRET_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        return true;
    }
    let has_letter = value.chars().any(|c| c.is_ascii_alphabetic());
    let has_digit = value.chars().any(|c| c.is_ascii_digit());
    value.len() >= 20 && has_letter && has_digit && !value.contains(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_prints_its_value() {
        let secret = Secret::new("hunter2-hunter2-hunter2");
        assert_eq!(format!("{secret:?}"), "\"[REDACTED]\"");
        assert_eq!(secret.to_string(), "[REDACTED]");
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"[REDACTED]\"");
        assert_eq!(secret.expose(), "hunter2-hunter2-hunter2");
    }

    #[test]
    fn url_passwords_are_redacted() {
        assert_eq!(
            redact_url_password("postgres://outboxd:s3cr%40t@db:5432/outbox?sslmode=require"),
            "postgres://outboxd:[REDACTED]@db:5432/outbox?sslmode=require"
        );
        assert_eq!(
            redact_url_password("postgres://outboxd@db/outbox"),
            "postgres://outboxd@db/outbox"
        );
        assert_eq!(
            redact_url_password("sqlite://outboxd.db"),
            "sqlite://outboxd.db"
        );
        assert_eq!(
            redact_url_password("postgres://u:p@host:notaport/db"),
            "postgres://u:[REDACTED]@host:notaport/db"
        );
        assert_eq!(
            redact_url_password("postgres://u@h/db?sslmode=require&password=hunter2#x"),
            "postgres://u@h/db?sslmode=require&password=[REDACTED]#x"
        );
        assert!(url_has_password("postgres://h/db?PASSWORD=x"));
        assert!(url_has_password("postgres://u:p@h/db"));
        assert!(!url_has_password("postgres://u@h/db?sslmode=require"));
    }

    #[test]
    fn secret_heuristic() {
        assert!(looks_like_secret("Authorization", "anything"));
        assert!(looks_like_secret("X-Api-Key", "abc"));
        assert!(looks_like_secret("X-Custom", "Bearer abc"));
        assert!(looks_like_secret("X-Custom", "a1b2c3d4e5f6g7h8i9j0k"));
        assert!(!looks_like_secret("Accept", "application/json"));
        assert!(!looks_like_secret("X-Client", "outboxd"));
    }
}
