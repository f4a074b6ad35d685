//! `[admin]`: the admin HTTP listener and its bearer tokens, each with a role and the
//! tenants it may see (authorization comes before any lookup).

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// The tenant wildcard in [`AdminToken::tenants`].
pub const ALL_TENANTS: &str = "*";

/// `[admin]`: admin API, metrics and health endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Listen address of the admin API, metrics and health endpoints.
    pub listen: SocketAddr,
    /// A separate listen address for `GET /metrics` alone; when set, the admin listener
    /// no longer serves `/metrics` (so a scraper needs no route to the admin API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    /// Marks the review page's session cookie `Secure` (browsers then send it over HTTPS
    /// only). Turn on when operators reach the admin listener through TLS.
    pub cookie_secure: bool,
    /// Bearer tokens accepted by the admin API (`[[admin.tokens]]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<AdminToken>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)),
            metrics_listen: None,
            cookie_secure: false,
            tokens: Vec::new(),
        }
    }
}

impl AdminConfig {
    /// The configured token whose value equals `presented`, compared in constant time.
    pub fn token_matching(&self, presented: &str) -> Option<&AdminToken> {
        use subtle::ConstantTimeEq;
        self.tokens.iter().find(|t| {
            t.token
                .as_ref()
                .is_some_and(|s| bool::from(s.expose().as_bytes().ct_eq(presented.as_bytes())))
        })
    }
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read intents, attempts and the reconciliation queue.
    Viewer,
    /// Everything a viewer may, plus cancel, resolve and redispatch.
    Operator,
}

impl Role {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }

    /// Whether the role may change state (cancel, resolve, redispatch).
    pub fn can_write(self) -> bool {
        self == Role::Operator
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[admin.tokens]]` entry. Exactly one of `token`, `token_env`, `token_file` is
/// given; after loading, `token` holds the resolved value whichever source it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminToken {
    /// Who holds the token (unique; appears in audit records of resolutions).
    #[serde(default)]
    pub name: String,
    /// The token itself (a literal here is discouraged); the resolved value after loading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// Environment variable holding the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// File holding the token (trailing newline ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// `viewer` or `operator`.
    pub role: Role,
    /// Tenants the token may see: `["*"]` for all, or an explicit list.
    #[serde(default)]
    pub tenants: Vec<String>,
}

impl AdminToken {
    /// Whether the token may see `tenant`.
    pub fn allows_tenant(&self, tenant: &str) -> bool {
        self.tenants.iter().any(|t| t == ALL_TENANTS || t == tenant)
    }

    /// Whether the token may see every tenant.
    pub fn allows_all_tenants(&self) -> bool {
        self.tenants.iter().any(|t| t == ALL_TENANTS)
    }
}
