//! Stored payloads as the store hands them out: the text the database returns (on both
//! backends) becomes a request body ([`PayloadBody`], for a claimed intent) or a payload
//! to show ([`StoredPayload`], for listings, the console and tests). One rule decides what
//! is JSON for both: the text `serde_json` parses into a `Value` (at most 128 levels deep,
//! no lone UTF-16 surrogate escape), parsed where it is used. Neither keeps a parsed tree.

use std::fmt;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::intent::IntentId;

/// A claimed intent's payload as the request body: its JSON, compact, object keys in
/// bytewise order (what `serde_json::Value` writes), built once when the claim is read.
///
/// The parsed tree is not kept. A payload near the 256 KiB limit can parse to tens of
/// times its size (a long `[0,0,…]` array: a `Value` of 32 bytes and, for exact numbers,
/// a heap string per element), and every claimed intent holds its payload until its
/// outcome is recorded: with the default request slots full of such payloads, the trees
/// took gigabytes. Held as bytes, an intent costs its payload's size; cloning is a
/// reference count.
///
/// `None` inside: the stored payload is not UTF-8 text (on SQLite a hand-written `INSERT`
/// can store other bytes, or a BLOB, that its JSON check accepts). Such an intent is not
/// sent: nothing it could send would be the producer's JSON.
#[derive(Clone, PartialEq, Eq)]
pub struct PayloadBody(Option<Bytes>);

impl PayloadBody {
    /// The body of `payload`.
    pub fn from_value(payload: &Value) -> Self {
        Self(Some(Bytes::from(payload.to_string())))
    }

    /// The body of a payload as the database returned it: parsed and written back
    /// compact, the tree living only for the length of this call.
    ///
    /// Text the database accepted but this parser refuses (nested deeper than its 128
    /// levels, or a lone UTF-16 surrogate escape, which only a hand-written `INSERT` or
    /// `UPDATE` can store; or an object whose first stored key is one of serde_json's
    /// marker keys, which an enqueue can store) is sent as stored, with a warning:
    /// failing the decoding would fail the whole claim batch, on every claim, and stop
    /// delivery for everyone.
    pub fn from_stored(stored: Vec<u8>, intent: IntentId) -> Self {
        match utf8(stored, intent) {
            Ok(text) => match parsed(&text, intent) {
                Some(payload) => Self::from_value(&payload),
                None => Self(Some(Bytes::from(text))),
            },
            Err(_) => Self(None),
        }
    }

    /// The bytes to send (a cheap clone of the shared buffer); `None`: not to be sent.
    pub fn bytes(&self) -> Option<Bytes> {
        self.0.clone()
    }
}

/// The length only: a payload may carry personal data and be 256 KiB long.
impl fmt::Debug for PayloadBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(body) => write!(f, "PayloadBody({} bytes)", body.len()),
            None => write!(f, "PayloadBody(not text)"),
        }
    }
}

/// A stored payload as people and tests see it ([`super::IntentRow::payload`]): the stored
/// text, parsed only when it is written out or looked at, so that a listing holds text, not
/// trees (the admin API's largest page is 500 rows, and 500 payloads near the 256 KiB limit
/// parsed into trees took gigabytes). Written out, it is the parsed JSON, compact, keys in
/// bytewise order; text the parser refuses (see [`PayloadBody::from_stored`]) is written as
/// a JSON string of that text, with a warning, and text that is not UTF-8 as a string with
/// replacement characters, so that one such row neither fails a listing of the rows around
/// it, nor a client that reads the listing with the same parser, nor hides itself.
#[derive(Clone)]
pub struct StoredPayload {
    text: String,
    intent: IntentId,
}

impl StoredPayload {
    /// A payload as the database returned it.
    pub fn from_stored(stored: Vec<u8>, intent: IntentId) -> Self {
        let text = utf8(stored, intent).unwrap_or_else(|bytes| {
            Value::String(String::from_utf8_lossy(&bytes).into()).to_string()
        });
        Self { text, intent }
    }

    /// The payload `value` (demo data, tests).
    pub fn from_value(value: &Value) -> Self {
        Self {
            text: value.to_string(),
            intent: IntentId::new(0),
        }
    }

    /// The payload parsed, or the stored text as a JSON string if the parser refuses it;
    /// the tree lives with the caller (one row at a time).
    pub fn to_value(&self) -> Value {
        parsed(&self.text, self.intent).unwrap_or_else(|| Value::String(self.text.clone()))
    }

    /// The payload indented for people (one intent's console page).
    pub fn pretty(&self) -> String {
        serde_json::to_string_pretty(&self.to_value()).unwrap_or_default()
    }

    /// The stored text's length in bytes.
    pub fn stored_len(&self) -> usize {
        self.text.len()
    }
}

/// Written out as [`StoredPayload::to_value`]: the tree of one payload lives only while
/// that payload is written.
impl Serialize for StoredPayload {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

/// The length only, as [`PayloadBody`]'s.
impl fmt::Debug for StoredPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoredPayload({} bytes)", self.text.len())
    }
}

/// The stored bytes as text, or, with a warning, the bytes back.
fn utf8(stored: Vec<u8>, intent: IntentId) -> Result<String, Vec<u8>> {
    String::from_utf8(stored).map_err(|e| {
        tracing::warn!(
            intent_id = intent.get(),
            bytes = e.as_bytes().len(),
            "a stored payload is not UTF-8 text; it is not sent, and shown with replacements"
        );
        e.into_bytes()
    })
}

/// The stored text parsed, the one rule for both uses; `None`, with a warning, when the
/// parser refuses it. The warning names the intent, the length and where the parser
/// stopped, never the content (the parser's message can quote a value).
fn parsed(text: &str, intent: IntentId) -> Option<Value> {
    serde_json::from_str(text)
        .map_err(|e| {
            tracing::warn!(intent_id = intent.get(), category = ?e.classify(), line = e.line(),
                column = e.column(), bytes = text.len(),
                "a stored payload could not be parsed; it is used as the stored text");
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shown(text: &str) -> StoredPayload {
        StoredPayload::from_stored(text.as_bytes().to_vec(), IntentId::new(1))
    }

    #[test]
    fn json_is_written_out_compact_with_sorted_keys() {
        let p = shown(r#"{"b": [1, 2.5, "x\u00e9"], "a": {"n": null, "t": true}}"#);
        assert_eq!(
            p.to_value(),
            json!({"a": {"n": null, "t": true}, "b": [1, 2.5, "xé"]})
        );
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"a":{"n":null,"t":true},"b":[1,2.5,"xé"]}"#
        );
    }

    #[test]
    fn text_the_value_parser_refuses_is_shown_as_a_string() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let within = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        for refused in [
            deep.as_str(),
            r#"{"a":"\ud800"}"#,
            r#"{"\udc00":1}"#,
            "{\"a\":1",
            "[1,]",
            // serde_json's marker keys (`arbitrary_precision`): a producer's object can
            // store one first (SQLite sorts `$` before letters; jsonb puts short keys first).
            r#"{"$serde_json::private::Number":"x","zzzzzzzzzzzzzzzzzzzzzzzzzzzzz":1}"#,
            r#"{"$serde_json::private::Number":"5","a":1}"#,
        ] {
            assert!(serde_json::from_str::<Value>(refused).is_err(), "{refused}");
            let p = shown(refused);
            assert_eq!(p.to_value(), json!(refused), "{refused}");
            assert_eq!(
                serde_json::to_value(&p).unwrap(),
                json!(refused),
                "{refused}"
            );
        }
        assert_eq!(
            serde_json::to_string(&shown(&within)).unwrap(),
            within,
            "100 levels are JSON"
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_shown_with_replacements() {
        let p = StoredPayload::from_stored(b"{\"a\":\"\x80\"}".to_vec(), IntentId::new(1));
        assert_eq!(p.to_value(), json!("{\"a\":\"\u{fffd}\"}"));
    }

    #[test]
    fn debug_shows_the_length_only() {
        assert_eq!(
            format!("{:?}", shown(r#"{"card":"4242"}"#)),
            "StoredPayload(15 bytes)"
        );
    }
}
