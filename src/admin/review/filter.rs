//! The intents browser's filter, parsed once from query or form pairs (so the browser,
//! its pagination links and the bulk dry run agree): tenant (inside the caller's scope),
//! action, state, creation time range, and `q` (an operation id or an idempotency key).

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::admin::auth::Caller;
use crate::admin::ApiError;
use crate::intent::IntentState;
use crate::store::IntentSearch;

/// Rows per intents page (and the most a bulk change from a filter takes).
pub(super) const PAGE: u32 = 50;

/// The filter as typed (kept to refill the form and build links).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct IntentFilterForm {
    pub tenant: String,
    pub action: String,
    pub state: String,
    pub from: String,
    pub to: String,
    pub q: String,
}

/// The value of every pair named `name`, in order.
pub(super) fn all<'a>(pairs: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    pairs
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The first value named `name`, trimmed ("" when absent).
pub(super) fn one<'a>(pairs: &'a [(String, String)], name: &str) -> &'a str {
    all(pairs, name).first().map_or("", |v| v.trim())
}

/// Decodes `application/x-www-form-urlencoded` text.
pub(super) fn pairs(encoded: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(encoded.as_bytes())
        .into_owned()
        .collect()
}

impl IntentFilterForm {
    /// The filter fields of `pairs`.
    pub(super) fn from_pairs(pairs: &[(String, String)]) -> Self {
        Self {
            tenant: one(pairs, "tenant").to_owned(),
            action: one(pairs, "action").to_owned(),
            state: one(pairs, "state").to_owned(),
            from: one(pairs, "from").to_owned(),
            to: one(pairs, "to").to_owned(),
            q: one(pairs, "q").to_owned(),
        }
    }

    /// The filter as query pairs (empty fields left out).
    pub(super) fn query(&self) -> String {
        let mut out = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in self.fields() {
            if !v.is_empty() {
                out.append_pair(k, v);
            }
        }
        out.finish()
    }

    /// `(name, value)` of each field.
    pub(super) fn fields(&self) -> [(&'static str, &str); 6] {
        [
            ("tenant", &self.tenant),
            ("action", &self.action),
            ("state", &self.state),
            ("from", &self.from),
            ("to", &self.to),
            ("q", &self.q),
        ]
    }

    /// The store search for `caller`: a tenant outside the scope matches nothing.
    pub(super) fn search(
        &self,
        caller: &Caller,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<IntentSearch, ApiError> {
        let state = match self.state.as_str() {
            "" => None,
            s => Some(IntentState::parse(s).ok_or_else(|| {
                ApiError::invalid(
                    "state",
                    "must be pending, in_flight, delivered, failed, unknown, cancelled or abandoned",
                )
            })?),
        };
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Ok(IntentSearch {
            scope: caller.scope_for(non_empty(&self.tenant).as_deref()),
            action: non_empty(&self.action),
            state,
            created_from: parse_time("from", &self.from)?,
            created_to: parse_time("to", &self.to)?,
            q: non_empty(&self.q),
            before_id,
            limit,
        })
    }
}

/// A time field: RFC 3339, or a browser's `datetime-local` (`2024-05-01T12:00`, seconds
/// optional), read as UTC. Empty is no bound.
pub(super) fn parse_time(
    field: &'static str,
    value: &str,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    if value.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(value) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    for format in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(value, format) {
            return Ok(Some(t.and_utc()));
        }
    }
    Err(ApiError::invalid(
        field,
        "must be a time like 2024-05-01T12:00 (UTC) or RFC 3339",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_the_browser_and_rfc3339_forms() {
        let want = DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap();
        for v in [
            "2024-05-01T12:00",
            "2024-05-01T12:00:00",
            "2024-05-01T14:00:00+02:00",
        ] {
            assert_eq!(
                parse_time("from", v).unwrap(),
                Some(want.with_timezone(&Utc)),
                "{v}"
            );
        }
        assert_eq!(parse_time("from", "").unwrap(), None);
        assert!(
            matches!(parse_time("to", "yesterday"), Err(ApiError::Invalid(f)) if f.field == "to")
        );
    }

    #[test]
    fn the_query_keeps_only_filled_fields() {
        let f = IntentFilterForm::from_pairs(&pairs("state=failed&q=a+b&action=&id=3"));
        assert_eq!(f.query(), "state=failed&q=a+b");
    }
}
