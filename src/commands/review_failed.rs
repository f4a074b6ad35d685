//! [`ReviewFailed`]: a store error ([`ReviewError`]) from a command about one
//! reconciliation item or intent ([`Subject`]), worded for the terminal ("no intent 42",
//! "... ; nothing changed"), with its exit code decided by the store error's variant
//! ([`ReviewFailed::exit_kind`]). The store's fields are kept as they are, not copied.

use std::error::Error;
use std::fmt;

use super::ExitKind;
use crate::intent::IntentId;
use crate::store::{ReviewError, CONFIRM_FIELD};

/// What a command was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// A reconciliation item, and its intent when the command knew it.
    Item {
        /// The item.
        item_id: i64,
        /// Its intent.
        intent_id: Option<IntentId>,
    },
    /// An intent.
    Intent(IntentId),
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Item { item_id, .. } => write!(f, "reconciliation item {item_id}"),
            Subject::Intent(id) => write!(f, "intent {id}"),
        }
    }
}

impl Subject {
    /// Reconciliation item `item_id` (its intent not looked up).
    pub fn item(item_id: i64) -> Self {
        Subject::Item {
            item_id,
            intent_id: None,
        }
    }

    /// The intent, for a message about its state.
    fn intent(self) -> String {
        match self {
            Subject::Item {
                intent_id: Some(id),
                ..
            }
            | Subject::Intent(id) => format!("intent {id}"),
            Subject::Item { item_id, .. } => format!("the intent of reconciliation item {item_id}"),
        }
    }
}

/// A store error about `subject`. Its message says everything the store's error says, so
/// the only cause it reports ([`Error::source`]) is a database failure's.
#[derive(Debug)]
pub struct ReviewFailed {
    /// What the command was about.
    pub subject: Subject,
    /// What the store said.
    pub error: ReviewError,
}

impl ReviewFailed {
    /// The exit code class: by the store error's variant.
    pub fn exit_kind(&self) -> ExitKind {
        match self.error {
            ReviewError::NotFound => ExitKind::NotFound,
            ReviewError::AlreadyResolved { .. } | ReviewError::WrongState { .. } => {
                ExitKind::Conflict
            }
            ReviewError::Invalid(_) => ExitKind::Usage,
            ReviewError::Store(_) => ExitKind::Failure,
        }
    }
}

impl fmt::Display for ReviewFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let subject = self.subject;
        match &self.error {
            ReviewError::NotFound => write!(f, "no {subject}"),
            ReviewError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            } => write!(
                f,
                "{subject} was already resolved as {resolution} by {resolved_by} at \
                 {resolved_at}; nothing changed"
            ),
            ReviewError::WrongState { state, what } => {
                write!(
                    f,
                    "{} is {state}: {what}; nothing changed",
                    subject.intent()
                )
            }
            ReviewError::Invalid(why) if why.field == CONFIRM_FIELD => write!(
                f,
                "{} (pass --confirm-may-act-twice to redispatch it anyway)",
                why.reason
            ),
            ReviewError::Invalid(why) => f.write_str(&why.reason),
            ReviewError::Store(e) => e.fmt(f),
        }
    }
}

impl Error for ReviewFailed {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match &self.error {
            ReviewError::Store(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::commands::report::one_chain;
    use crate::commands::CommandError;
    use crate::intent::InvalidField;
    use crate::store::StoreError;

    const ITEM: Subject = Subject::Item {
        item_id: 7,
        intent_id: Some(42),
    };

    /// Each store error about a subject → the exit code and the whole printed message.
    fn table() -> Vec<(Subject, ReviewError, ExitKind, &'static str)> {
        let at = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
        vec![
            (
                ITEM,
                ReviewError::NotFound,
                ExitKind::NotFound,
                "no reconciliation item 7",
            ),
            (
                Subject::Intent(42),
                ReviewError::NotFound,
                ExitKind::NotFound,
                "no intent 42",
            ),
            (
                ITEM,
                ReviewError::AlreadyResolved {
                    resolution: "abandoned".into(),
                    resolved_by: "ops-alice".into(),
                    resolved_at: at,
                },
                ExitKind::Conflict,
                "reconciliation item 7 was already resolved as abandoned by ops-alice at \
                 2024-05-01 12:00:00 UTC; nothing changed",
            ),
            (
                Subject::Intent(42),
                ReviewError::WrongState {
                    state: "delivered".into(),
                    what: "only a pending intent can be cancelled",
                },
                ExitKind::Conflict,
                "intent 42 is delivered: only a pending intent can be cancelled; nothing changed",
            ),
            (
                ITEM,
                ReviewError::WrongState {
                    state: "unknown".into(),
                    what: "changed since the dry run; not applied",
                },
                ExitKind::Conflict,
                "intent 42 is unknown: changed since the dry run; not applied; nothing changed",
            ),
            (
                Subject::item(7),
                ReviewError::WrongState {
                    state: "unknown".into(),
                    what: "changed since the dry run; not applied",
                },
                ExitKind::Conflict,
                "the intent of reconciliation item 7 is unknown: changed since the dry run; not \
                 applied; nothing changed",
            ),
            (
                ITEM,
                ReviewError::Invalid(InvalidField::new("note", "a note saying why is required")),
                ExitKind::Usage,
                "a note saying why is required",
            ),
            (
                ITEM,
                ReviewError::Invalid(InvalidField::new(CONFIRM_FIELD, "it may act twice")),
                ExitKind::Usage,
                "it may act twice (pass --confirm-may-act-twice to redispatch it anyway)",
            ),
            (
                ITEM,
                ReviewError::Store(StoreError::Database(sqlx::Error::PoolTimedOut)),
                ExitKind::Failure,
                "database error: pool timed out while waiting for an open connection",
            ),
        ]
    }

    #[test]
    fn each_store_error_has_its_exit_code_and_message() {
        for (subject, error, kind, message) in table() {
            let e = CommandError::from(ReviewFailed { subject, error });
            assert_eq!(e.exit_kind(), kind, "{e:?}");
            // As `main` reports it: the outermost kind, each cause once.
            let first: &(dyn Error + 'static) = &e;
            let chain: Vec<_> = std::iter::successors(Some(first), |e| (*e).source()).collect();
            assert_eq!(ExitKind::of_chain(chain.iter().copied()), kind, "{e:?}");
            assert_eq!(one_chain(chain.iter().map(|e| e.to_string())), message);
        }
    }
}
