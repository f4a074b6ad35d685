//! The payload digest: sha256 over a canonical JSON form of (action, payload version,
//! payload). Same key + same digest is a replay; same key + different digest is a conflict.
//!
//! # Canonical form
//!
//! The digest input is the canonical JSON text of the object
//! `{"action": <action>, "payload": <payload>, "payload_version": <version>}`, encoded as
//! UTF-8, where canonical JSON is:
//!
//! * no whitespace anywhere outside strings;
//! * object members sorted by key, comparing keys by Unicode code point (byte order of
//!   UTF-8); a duplicated key keeps its last value;
//! * strings written with `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t` escapes, other
//!   characters below U+0020 as `\u00xx` (lowercase hex), and every other character as
//!   itself (no `\u` escapes for non-ASCII, `/` not escaped);
//! * `true`, `false`, `null` as written;
//! * numbers: the exact decimal value of the number as written, never rounded through a
//!   float, in plain notation: no exponent, no leading zeros (but `0` before a point), no
//!   trailing fractional zeros, no `.` when integral, `0` for every zero (`-0.0` too). So
//!   `1.50E+3` is `1500`, `9007199254740993.0` is `9007199254740993` and
//!   `1.234567890123456789` keeps every digit. (PostgreSQL: `trim_scale(n::numeric)::text`.)
//!
//! The digest is the lowercase hex sha256 of that text. PostgreSQL's
//! `outbox_canonical_json` / `outbox_payload_sha256` implement the same definition; the
//! shared vectors in `tests/it/digest_vectors.json` are checked against both.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use crate::intent::{ActionName, InvalidField, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH};

/// Lowercase hex sha256 of the canonical (action, payload version, payload) form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PayloadDigest(String);

impl PayloadDigest {
    /// The 64 lowercase hex characters.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Wraps a digest read back from the database.
    pub fn from_stored(hex: String) -> Self {
        Self(hex)
    }
}

impl std::fmt::Display for PayloadDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks the payload shape and size, then computes its digest.
///
/// The payload must be a JSON object, nested at most [`MAX_PAYLOAD_DEPTH`] deep, whose
/// canonical form is at most [`MAX_PAYLOAD_BYTES`] bytes, with no NUL character in any
/// string or key (PostgreSQL cannot store one).
pub fn payload_digest(
    action: &ActionName,
    payload_version: i32,
    payload: &Value,
) -> Result<PayloadDigest, InvalidField> {
    let canonical_payload = canonical_payload(payload)?;
    let mut text = String::with_capacity(canonical_payload.len() + action.as_str().len() + 48);
    text.push_str("{\"action\":");
    write_string(&mut text, action.as_str());
    text.push_str(",\"payload\":");
    text.push_str(&canonical_payload);
    let _ = write!(text, ",\"payload_version\":{payload_version}}}");
    Ok(PayloadDigest(hex::encode(Sha256::digest(text.as_bytes()))))
}

/// The canonical JSON text of a payload, after validating it.
pub fn canonical_payload(payload: &Value) -> Result<String, InvalidField> {
    if !payload.is_object() {
        return Err(InvalidField::new(
            "payload",
            format!("must be a JSON object, got {}", json_kind(payload)),
        ));
    }
    let mut out = String::new();
    write_value(&mut out, payload, 1)?;
    if out.len() > MAX_PAYLOAD_BYTES {
        return Err(InvalidField::new(
            "payload",
            format!(
                "is {} bytes in canonical form, the limit is {MAX_PAYLOAD_BYTES}",
                out.len()
            ),
        ));
    }
    Ok(out)
}

/// Canonical JSON of any value (used by tests and the SQL agreement checks).
pub fn canonical_json(value: &Value) -> Result<String, InvalidField> {
    let mut out = String::new();
    write_value(&mut out, value, 1)?;
    Ok(out)
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn write_value(out: &mut String, value: &Value, depth: usize) -> Result<(), InvalidField> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => {
            check_no_nul(s)?;
            write_string(out, s)
        }
        Value::Array(items) => {
            check_depth(depth)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            check_depth(depth)?;
            write_object(out, members, depth)?;
        }
    }
    Ok(())
}

fn write_object(
    out: &mut String,
    members: &Map<String, Value>,
    depth: usize,
) -> Result<(), InvalidField> {
    let mut keys: Vec<&String> = members.keys().collect();
    // `str` orders by UTF-8 bytes, which is Unicode code point order.
    keys.sort_unstable();
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        check_no_nul(key)?;
        write_string(out, key);
        out.push(':');
        write_value(out, &members[key], depth + 1)?;
    }
    out.push('}');
    Ok(())
}

fn check_depth(depth: usize) -> Result<(), InvalidField> {
    if depth > MAX_PAYLOAD_DEPTH {
        Err(InvalidField::new(
            "payload",
            format!("is nested more than {MAX_PAYLOAD_DEPTH} levels deep"),
        ))
    } else {
        Ok(())
    }
}

fn check_no_nul(s: &str) -> Result<(), InvalidField> {
    if s.contains('\0') {
        Err(InvalidField::new(
            "payload",
            "contains a NUL character (\\u0000), which cannot be stored",
        ))
    } else {
        Ok(())
    }
}

/// Writes `n` exactly, as the plain decimal of its value: no exponent, no leading zeros
/// but one before the point, no trailing fractional zeros, no `.` when integral, `0` for
/// every zero. The number's text as written (serde_json keeps it: `arbitrary_precision`)
/// is read digit by digit, never through a float, so `1.234567890123456789` and
/// `9007199254740993.0` keep every digit. This is PostgreSQL's
/// `trim_scale(value::numeric)::text`.
fn write_number(out: &mut String, n: &Number) -> Result<(), InvalidField> {
    let text = n.to_string();
    let plain = exact_decimal(&text).ok_or_else(|| {
        InvalidField::new(
            "payload",
            format!(
                "has a number ({}) with more digits than can be stored exactly (131072 before the point, 16383 after, {MAX_PAYLOAD_BYTES} bytes in all)",
                abbreviate(&text)
            ),
        )
    })?;
    // Checked as it grows, so a payload of many huge exponents (`1e200000`, ten bytes of
    // input each) is refused before its expansion is built, not after.
    if out.len() + plain.len() > MAX_PAYLOAD_BYTES {
        return Err(InvalidField::new(
            "payload",
            format!("is over {MAX_PAYLOAD_BYTES} bytes in canonical form, the limit is {MAX_PAYLOAD_BYTES}"),
        ));
    }
    out.push_str(&plain);
    Ok(())
}

fn abbreviate(text: &str) -> String {
    if text.len() <= 40 {
        text.to_owned()
    } else {
        format!(
            "{}...",
            &text[..text.char_indices().nth(40).map_or(text.len(), |(i, _)| i)]
        )
    }
}

/// Most digits before the point a number may have (PostgreSQL's numeric limit).
const NUMERIC_MAX_INTEGER_DIGITS: i64 = 131_072;
/// Most digits after the point a number may have (PostgreSQL's numeric limit).
const NUMERIC_MAX_FRACTION_DIGITS: i64 = 16_383;

/// The exact plain decimal form of a JSON number's text (see [`write_number`]), or `None`
/// when it would be longer than [`MAX_PAYLOAD_BYTES`], has more digits than PostgreSQL's
/// numeric holds (131072 before the point, 16383 after), or is not a JSON number.
pub fn exact_decimal(text: &str) -> Option<String> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], unsigned[at + 1..].parse::<i64>().ok()?),
        None => (unsigned, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int_part.is_empty()
        || !(int_part.bytes().chain(frac_part.bytes())).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let digits: String = [int_part, frac_part].concat();
    let leading = digits.len() - digits.trim_start_matches('0').len();
    let significant = digits.trim_matches('0');
    if significant.is_empty() {
        return Some("0".to_owned());
    }
    // Where the decimal point falls, counted in digits from the first significant one.
    let point = i64::try_from(int_part.len())
        .ok()?
        .checked_add(exponent)?
        .checked_sub(i64::try_from(leading).ok()?)?;
    let len = i64::try_from(significant.len()).ok()?;
    // PostgreSQL's numeric holds at most 131072 digits before the point and 16383 after:
    // one bound for both backends, so a number is accepted by both or by neither.
    let fraction_digits = (len - point).max(0);
    if point > NUMERIC_MAX_INTEGER_DIGITS || fraction_digits > NUMERIC_MAX_FRACTION_DIGITS {
        return None;
    }
    let width = if point <= 0 {
        2 - point + len
    } else {
        point.max(len) + 1
    };
    if width > i64::try_from(MAX_PAYLOAD_BYTES).ok()? {
        return None;
    }
    let mut out = String::with_capacity(usize::try_from(width).ok()? + 1);
    if negative {
        out.push('-');
    }
    if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', usize::try_from(-point).ok()?));
        out.push_str(significant);
    } else if point >= len {
        out.push_str(significant);
        out.extend(std::iter::repeat_n('0', usize::try_from(point - len).ok()?));
    } else {
        let (whole, fraction) = significant.split_at(usize::try_from(point).ok()?);
        out.push_str(whole);
        out.push('.');
        out.push_str(fraction);
    }
    Some(out)
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn action() -> ActionName {
        ActionName::parse("issue_refund").unwrap()
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": [1, 2, {"y": true, "x": null}]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":[1,2,{"x":null,"y":true}],"b":1}"#).unwrap();
        assert_eq!(
            payload_digest(&action(), 1, &a),
            payload_digest(&action(), 1, &b)
        );
        assert_eq!(
            canonical_json(&a).unwrap(),
            r#"{"a":[1,2,{"x":null,"y":true}],"b":1}"#
        );
    }

    #[test]
    fn numbers_are_canonical() {
        let v: Value = serde_json::from_str(
            r#"[1.0, 1e2, -0.0, 0.1, 1.5e-7, 1e21, 18446744073709551616, -5, 9007199254740993.0,
                1.234567890123456789, 123456789012345678901234567890, 0.000E+5, -12.3400e-1, 1.50E+3]"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&v).unwrap(),
            "[1,100,0,0.1,0.00000015,1000000000000000000000,18446744073709551616,-5,9007199254740993,\
             1.234567890123456789,123456789012345678901234567890,0,-1.234,1500]"
        );
    }

    #[test]
    fn exact_decimal_keeps_every_digit_and_bounds_the_width() {
        assert_eq!(exact_decimal("1e-5").as_deref(), Some("0.00001"));
        assert_eq!(exact_decimal("-0e10").as_deref(), Some("0"));
        assert_eq!(exact_decimal("00.0100").as_deref(), Some("0.01"));
        assert_eq!(exact_decimal("-1.5E+1").as_deref(), Some("-15"));
        assert_eq!(exact_decimal("12345e-2").as_deref(), Some("123.45"));
        assert_eq!(exact_decimal("1e999999999"), None);
        assert_eq!(exact_decimal("1e-999999999"), None);
        assert_eq!(exact_decimal("1e99999999999999999999999"), None);
        // PostgreSQL's numeric bounds, on both backends.
        assert!(exact_decimal("1e131071").is_some());
        assert_eq!(exact_decimal("1e131072"), None);
        assert!(exact_decimal("1e-16383").is_some());
        assert_eq!(exact_decimal("1e-16384"), None);
        let err = payload_digest(
            &action(),
            1,
            &serde_json::from_str(r#"{"n": 1e300000}"#).unwrap(),
        )
        .unwrap_err();
        assert_eq!(err.field, "payload");
        // Many huge exponents: refused while the canonical text grows, not after.
        let many = format!("{{\"n\": [{}]}}", vec!["1e100000"; 1000].join(","));
        let err = payload_digest(&action(), 1, &serde_json::from_str(&many).unwrap()).unwrap_err();
        assert!(err.reason.contains("canonical form"), "{err}");
    }

    #[test]
    fn strings_escape_only_what_json_requires() {
        let v = json!({"s": "é \u{1f} \" \\ / \n \u{2028}"});
        assert_eq!(
            canonical_json(&v).unwrap(),
            "{\"s\":\"é \\u001f \\\" \\\\ / \\n \u{2028}\"}"
        );
    }

    #[test]
    fn any_change_changes_the_digest() {
        let base = json!({"amount": 100, "currency": "EUR"});
        let d = payload_digest(&action(), 1, &base).unwrap();
        assert_ne!(d, payload_digest(&action(), 2, &base).unwrap());
        assert_ne!(
            d,
            payload_digest(&ActionName::parse("other").unwrap(), 1, &base).unwrap()
        );
        assert_ne!(
            d,
            payload_digest(&action(), 1, &json!({"amount": 101, "currency": "EUR"})).unwrap()
        );
    }

    #[test]
    fn rejects_non_objects_nul_depth_and_size() {
        assert_eq!(
            payload_digest(&action(), 1, &json!([1])).unwrap_err().field,
            "payload"
        );
        assert!(payload_digest(&action(), 1, &json!({"a": "x\u{0}y"})).is_err());
        let mut deep = json!(1);
        for _ in 0..MAX_PAYLOAD_DEPTH {
            deep = json!([deep]);
        }
        assert!(payload_digest(&action(), 1, &json!({ "d": deep })).is_err());
        let big = json!({"blob": "x".repeat(MAX_PAYLOAD_BYTES)});
        let err = payload_digest(&action(), 1, &big).unwrap_err();
        assert!(err.reason.contains("limit"), "{err}");
    }
}
