//! Who is calling: a presented token is matched against every configured token in
//! constant time, giving a [`Caller`] with a name (the audit actor), a role and a tenant
//! scope. The JSON API reads the token from `Authorization: Bearer`; the review page from
//! its session cookie (see `review`). Token values never appear in logs, errors or pages.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{AdminContext, ApiError, Forbidden};
use crate::config::{AdminToken, Role};
use crate::store::TenantScope;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's configured name; recorded as the actor of every change.
    pub name: String,
    /// What the caller may do.
    pub role: Role,
    /// Which tenants the caller may see and touch.
    pub scope: TenantScope,
}

impl Caller {
    fn from_token(token: &AdminToken) -> Self {
        let scope = if token.allows_all_tenants() {
            TenantScope::All
        } else {
            TenantScope::Only(token.tenants.clone())
        };
        Self {
            name: token.name.clone(),
            role: token.role,
            scope,
        }
    }

    /// Fails with `403` unless the caller may change state.
    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.role.can_write() {
            Ok(())
        } else {
            Err(Forbidden::ViewerRole.into())
        }
    }

    /// The caller's scope narrowed to `tenant` when one is asked for. A tenant outside the
    /// scope gives an empty scope (nothing matches), never an error that would confirm it.
    pub fn scope_for(&self, tenant: Option<&str>) -> TenantScope {
        match tenant {
            None => self.scope.clone(),
            Some(t) if self.scope.allows(t) => TenantScope::Only(vec![t.to_owned()]),
            Some(_) => TenantScope::Only(Vec::new()),
        }
    }
}

/// The caller whose configured token equals `presented`, if any.
///
/// Both sides are hashed first so the comparison always covers 32 bytes, and every
/// configured token is compared (no early exit), so timing reveals neither a token's length
/// nor which entry matched.
pub fn authenticate(tokens: &[AdminToken], presented: &str) -> Option<Caller> {
    if presented.is_empty() {
        return None;
    }
    let presented = Sha256::digest(presented.as_bytes());
    let mut found = None;
    for token in tokens {
        let Some(secret) = token.token.as_ref().filter(|s| !s.is_empty()) else {
            continue;
        };
        let configured = Sha256::digest(secret.expose().as_bytes());
        if bool::from(configured.ct_eq(&presented)) && found.is_none() {
            found = Some(token);
        }
    }
    found.map(Caller::from_token)
}

/// The token in an `Authorization: Bearer <token>` header.
fn bearer_token(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl FromRequestParts<AdminContext> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &AdminContext,
    ) -> Result<Self, Self::Rejection> {
        bearer_token(parts)
            .and_then(|token| authenticate(&ctx.tokens, token))
            .ok_or(ApiError::Unauthenticated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn token(name: &str, value: Option<&str>, role: Role, tenants: &[&str]) -> AdminToken {
        AdminToken {
            name: name.into(),
            token: value.map(Secret::new),
            token_env: None,
            token_file: None,
            role,
            tenants: tenants.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn matches_exactly_one_configured_token() {
        let tokens = [
            token("unset", None, Role::Operator, &["*"]),
            token(
                "alice",
                Some("alice-token-0123456789"),
                Role::Operator,
                &["*"],
            ),
            token(
                "bob",
                Some("bob-token-0123456789ab"),
                Role::Viewer,
                &["acme"],
            ),
        ];
        let bob = authenticate(&tokens, "bob-token-0123456789ab").unwrap();
        assert_eq!(bob.name, "bob");
        assert_eq!(bob.scope, TenantScope::Only(vec!["acme".into()]));
        assert_eq!(
            authenticate(&tokens, "alice-token-0123456789")
                .unwrap()
                .scope,
            TenantScope::All
        );
        assert_eq!(authenticate(&tokens, "alice-token-012345678"), None);
        assert_eq!(authenticate(&tokens, ""), None);
    }

    #[test]
    fn narrowing_to_a_foreign_tenant_matches_nothing() {
        let tokens = [token(
            "a",
            Some("a-token-0123456789ab"),
            Role::Viewer,
            &["acme"],
        )];
        let caller = authenticate(&tokens, "a-token-0123456789ab").unwrap();
        assert_eq!(caller.scope_for(Some("globex")), TenantScope::Only(vec![]));
        assert_eq!(
            caller.scope_for(Some("acme")),
            TenantScope::Only(vec!["acme".into()])
        );
        assert!(caller.require_operator().is_err());
    }
}
