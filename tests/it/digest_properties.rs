//! Property tests for the payload digest that work on *text*: a generated value is written
//! twice as different JSON texts of the same value (member order, whitespace, `\u` escapes
//! with surrogate pairs, numbers in other notations such as `1.0`, `10e-1`, `-0.0`, `1E+2`,
//! earlier duplicates of a key that the last one overrides), and each text is digested as
//! it stands: by the Rust digest, checked against an independent model of the canonical
//! form, and on PostgreSQL by `outbox_payload_sha256` on the same text. Both sides must
//! succeed: two errors never count as agreement.

use crate::support;

use std::collections::BTreeMap;

use outboxd::digest::{canonical_payload, payload_digest};
use outboxd::intent::{ActionName, MAX_PAYLOAD_DEPTH};
use outboxd::store::Database;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use support::TestDb;

/// A JSON value as the test models it; numbers are exact: `(-1)^neg × digits × 10^exp`.
#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Num { neg: bool, digits: String, exp: i32 },
    Str(String),
    Arr(Vec<J>),
    Obj(BTreeMap<String, J>),
}

fn arb_string() -> impl Strategy<Value = String> {
    // Control characters, quotes, backslashes, non-BMP and characters whose UTF-16 and
    // UTF-8 orders differ (U+FF5E sorts before U+1F600 by code point, after it in UTF-16).
    "[a-zA-Z0-9 é\u{ff5e}😀\u{1}\u{8}\u{1f}\u{7f}\u{2028}\"\\\\/\n\t]{0,8}"
}

fn arb_number() -> impl Strategy<Value = J> {
    prop_oneof![
        // Small, big (beyond u64), and high-precision digit strings; zeros included.
        (any::<bool>(), "[0-9]{1,3}", -3i32..4),
        (any::<bool>(), "[1-9][0-9]{18,30}", -25i32..25),
        (any::<bool>(), "0{1,3}", -5i32..5),
        (
            any::<bool>(),
            Just("18446744073709551616".to_owned()),
            Just(0)
        ),
        (any::<bool>(), Just("9007199254740993".to_owned()), -1i32..2),
    ]
    .prop_map(|(neg, digits, exp)| J::Num { neg, digits, exp })
}

fn arb_json() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        arb_number(),
        arb_string().prop_map(J::Str),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Arr),
            prop::collection::btree_map(arb_string(), inner, 0..4).prop_map(J::Obj),
        ]
    })
}

fn arb_payload() -> impl Strategy<Value = (J, u64)> {
    (
        prop::collection::btree_map(arb_string(), arb_json(), 0..5).prop_map(J::Obj),
        any::<u64>(),
    )
}

/// A tiny deterministic choice source, so one seed picks one spelling.
struct Choices(u64);

impl Choices {
    fn pick(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The model's own canonical form (independent of the crate's).
fn model_canonical(v: &J, out: &mut String) {
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num { neg, digits, exp } => out.push_str(&model_number(*neg, digits, *exp)),
        J::Str(s) => model_string(s, out),
        J::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                model_canonical(item, out);
            }
            out.push(']');
        }
        J::Obj(members) => {
            out.push('{');
            // BTreeMap<String, _> iterates in UTF-8 byte order, which is code point order.
            for (i, (k, val)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                model_string(k, out);
                out.push(':');
                model_canonical(val, out);
            }
            out.push('}');
        }
    }
}

fn model_number(neg: bool, digits: &str, exp: i32) -> String {
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return "0".to_owned();
    }
    let trimmed = significant.trim_end_matches('0');
    let exp = exp + (significant.len() - trimmed.len()) as i32;
    let sign = if neg { "-" } else { "" };
    let len = trimmed.len() as i32;
    if exp >= 0 {
        format!("{sign}{trimmed}{}", "0".repeat(exp as usize))
    } else if -exp < len {
        let (whole, frac) = trimmed.split_at((len + exp) as usize);
        format!("{sign}{whole}.{frac}")
    } else {
        format!("{sign}0.{}{trimmed}", "0".repeat((-exp - len) as usize))
    }
}

fn model_string(s: &str, out: &mut String) {
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
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Another JSON text of the same value, its spelling chosen by `ch`.
fn respell(v: &J, ch: &mut Choices, out: &mut String) {
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num { neg, digits, exp } => out.push_str(&respell_number(*neg, digits, *exp, ch)),
        J::Str(s) => respell_string(s, ch, out),
        J::Arr(items) => {
            out.push_str(["[", "[ ", "[\n"][ch.pick(3) as usize]);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str([",", " , ", ",\n\t"][ch.pick(3) as usize]);
                }
                respell(item, ch, out);
            }
            out.push_str([" ]", "]"][ch.pick(2) as usize]);
        }
        J::Obj(members) => {
            let mut entries: Vec<(&String, &J)> = members.iter().collect();
            // Reverse or rotate the member order.
            if ch.pick(2) == 0 {
                entries.reverse();
            } else if !entries.is_empty() {
                let by = ch.pick(entries.len() as u64) as usize;
                entries.rotate_left(by);
            }
            out.push_str(["{", "{ ", " {\r\n"][ch.pick(3) as usize]);
            let mut first = true;
            for (k, val) in entries {
                // Sometimes an earlier duplicate of the key, which the last one overrides.
                let decoy = ch.pick(4) == 0;
                for (n, value) in [(0, &J::Str("decoy".into())), (1, val)] {
                    if n == 0 && !decoy {
                        continue;
                    }
                    if !first {
                        out.push_str([",", " ,\n ", ","][ch.pick(3) as usize]);
                    }
                    first = false;
                    respell_string(k, ch, out);
                    out.push_str([":", " : ", ":\t"][ch.pick(3) as usize]);
                    respell(value, ch, out);
                }
            }
            out.push_str(["}", " }", "\n}"][ch.pick(3) as usize]);
        }
    }
}

fn respell_number(neg: bool, digits: &str, exp: i32, ch: &mut Choices) -> String {
    let sign = if neg { "-" } else { "" };
    // JSON forbids leading zeros on the integer part: write the digits with a point after
    // the first one (or as "0.<digits>") and shift the exponent to match.
    let digits = if digits.len() > 1 {
        digits.trim_start_matches('0')
    } else {
        digits
    };
    let digits = if digits.is_empty() { "0" } else { digits };
    let extra_zeros = "0".repeat(ch.pick(3) as usize);
    let e = ["e", "E"][ch.pick(2) as usize];
    match ch.pick(4) {
        // d.ddd × 10^(exp + len - 1)
        0 => {
            let (first, rest) = digits.split_at(1);
            let shift = exp + digits.len() as i32 - 1;
            let plus = if shift >= 0 && ch.pick(2) == 0 {
                "+"
            } else {
                ""
            };
            format!("{sign}{first}.{rest}{extra_zeros}0{e}{plus}{shift}")
        }
        // digits × 10^exp, with trailing fractional zeros
        1 => format!("{sign}{digits}.0{extra_zeros}{e}{exp}"),
        // 0.digits × 10^(exp + len)
        2 => format!("{sign}0.{digits}{e}{}", exp + digits.len() as i32),
        // plain digits with the exponent as is
        _ => format!("{sign}{digits}{e}{exp}"),
    }
}

fn respell_string(s: &str, ch: &mut Choices, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let must_escape = c == '"' || c == '\\' || (c as u32) < 0x20;
        if must_escape || ch.pick(3) == 0 {
            match (c, ch.pick(2)) {
                ('"', 0) => out.push_str("\\\""),
                ('\\', 0) => out.push_str("\\\\"),
                ('/', 0) => out.push_str("\\/"),
                ('\n', 0) => out.push_str("\\n"),
                _ => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{:04X}", unit));
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out.push('"');
}

fn texts(v: &J, seed: u64) -> (String, String, String) {
    let mut canonical = String::new();
    model_canonical(v, &mut canonical);
    let (mut a, mut b) = (String::new(), String::new());
    respell(v, &mut Choices(seed | 1), &mut a);
    respell(v, &mut Choices(seed.rotate_left(17) | 1), &mut b);
    (canonical, a, b)
}

/// The Rust digest of a JSON *text*, as a producer would hand it over.
fn rust_digest(text: &str) -> Result<(String, String), String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{text}: {e}"))?;
    let action = ActionName::parse("act").unwrap();
    let canonical = canonical_payload(&value).map_err(|e| format!("{text}: {e}"))?;
    let digest = payload_digest(&action, 1, &value).map_err(|e| format!("{text}: {e}"))?;
    Ok((canonical, digest.as_str().to_owned()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Two spellings of one value have one digest, whose canonical text is the model's.
    #[test]
    fn digest_ignores_spelling((value, seed) in arb_payload()) {
        let (canonical, a, b) = texts(&value, seed);
        let (canon_a, digest_a) = rust_digest(&a).map_err(TestCaseError::fail)?;
        let (canon_b, digest_b) = rust_digest(&b).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&canon_a, &canonical, "text {}", a);
        prop_assert_eq!(&canon_b, &canonical, "text {}", b);
        prop_assert_eq!(digest_a, digest_b);
    }
}

/// Nesting up to the limit is accepted and one level more refused, the same in Rust and SQL
/// (checked in [`postgres_digest_agrees_on_generated_texts`]).
fn nested(depth: usize) -> String {
    format!(
        "{{\"d\":{}1{}}}",
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

#[test]
fn nesting_limit_is_exact() {
    assert!(rust_digest(&nested(MAX_PAYLOAD_DEPTH)).is_ok());
    assert!(rust_digest(&nested(MAX_PAYLOAD_DEPTH + 1)).is_err());
}

/// PostgreSQL's `outbox_payload_sha256` on the same texts gives the same canonical form and
/// digest as Rust: the "Rust and SQL compute the same digest" guarantee, as a property.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_digest_agrees_on_generated_texts() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let mut runner = TestRunner::new(Config::default());
    let strategy = arb_payload();
    let mut checked = 0;
    for _ in 0..300 {
        let (value, seed) = strategy.new_tree(&mut runner).unwrap().current();
        let (canonical, a, b) = texts(&value, seed);
        for text in [&a, &b] {
            let (rust_canonical, rust_digest) = rust_digest(text).unwrap();
            let (sql_canonical, sql_digest): (String, String) = sqlx::query_as(
                "SELECT outbox_canonical_json($1::text::jsonb), outbox_payload_sha256('act', 1, $1::text::jsonb)",
            )
            .bind(text)
            .fetch_one(pool)
            .await
            .unwrap_or_else(|e| panic!("SQL refused {text}: {e}"));
            assert_eq!(sql_canonical, canonical, "text {text}");
            assert_eq!(sql_canonical, rust_canonical, "text {text}");
            assert_eq!(sql_digest, rust_digest, "text {text}");
            checked += 1;
        }
    }
    assert_eq!(checked, 600);
    for depth in [MAX_PAYLOAD_DEPTH, MAX_PAYLOAD_DEPTH + 1] {
        let sql = sqlx::query_scalar::<_, String>(
            "SELECT outbox_payload_sha256('act', 1, $1::text::jsonb)",
        )
        .bind(nested(depth))
        .fetch_one(pool)
        .await;
        assert_eq!(
            sql.is_ok(),
            rust_digest(&nested(depth)).is_ok(),
            "depth {depth}"
        );
    }
}

/// Hand-picked texts where Rust and SQL could part ways: `\u` escapes of non-BMP characters
/// (as surrogate pairs) in keys and values, keys whose UTF-16 and code point orders differ,
/// duplicate keys, zeros and ones in every notation, numbers in nested arrays, big exponents,
/// and canonical forms exactly at and one byte over the 256 KiB limit (built from long
/// digit strings). Both sides succeed with the same canonical form and digest, or both refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_digest_agrees_on_edge_texts() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let at_limit = |last_exp: usize| format!("{{\"n\":[1e100000,1E+100000,{}e{last_exp}]}}", "1");
    let mut texts: Vec<String> = [
        r#"{"\ud83d\ude00": "\ud83d\ude00", "\uff5e": 1, "\ue000": 2, "a": "\u00e9\u2028"}"#,
        r#"{"k": 1, "k": [2, {"k": 3, "k": 4}], "K": 0}"#,
        r#"{"z": [0.0e-0, -0, -0.0, 0E+5, 0e-99, 1.0E+0, 1e0, 10e-1, 100E-2, 1E+2]}"#,
        r#"{"deep": [[[[-0.000, [1.50, [2.500e1]]]]]], "e": [1e400, -1e-400, 123456789012345678901234567890e-30]}"#,
        r#"{"big": 18446744073709551616, "neg": -9223372036854775809, "p": 0.1000000000000000055511151231257827}"#,
        r#"{"s": "\u0000"}"#,
        r#"{"s": "\"\\\/\b\f\n\r\t\u001f\u007f"}"#,
        r#"{}"#,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // 6 + 100001 + 1 + 100001 + 1 + (1 + exp) + 2 bytes: exp 62131 is exactly 262144.
    texts.push(at_limit(62131));
    texts.push(at_limit(62132));
    texts.push(format!("{{\"s\":\"{}\"}}", "x".repeat(262144 - 8)));
    texts.push(format!("{{\"s\":\"{}\"}}", "x".repeat(262144 - 7)));
    texts.push(format!(
        "{{\"s\":\"{}\"}}",
        "\u{e9}".repeat((262144 - 8) / 2)
    ));
    for text in &texts {
        for version in [1, 1_000_000] {
            let value: Result<serde_json::Value, _> = serde_json::from_str(text);
            let rust = value.map_err(|e| e.to_string()).and_then(|v| {
                let action = ActionName::parse("act").unwrap();
                let canonical = canonical_payload(&v).map_err(|e| e.to_string())?;
                let digest = payload_digest(&action, version, &v).map_err(|e| e.to_string())?;
                Ok((canonical, digest.as_str().to_owned()))
            });
            let sql: Result<(String, String), _> = sqlx::query_as(
                "SELECT outbox_canonical_json($1::text::jsonb), outbox_payload_sha256('act', $2, $1::text::jsonb)",
            )
            .bind(text)
            .bind(version)
            .fetch_one(pool)
            .await;
            let short = &text[..text.len().min(80)];
            match (rust, sql) {
                (Ok((rc, rd)), Ok((sc, sd))) => {
                    assert_eq!(rc, sc, "canonical of {short}");
                    assert_eq!(rd, sd, "digest of {short} (version {version})");
                }
                (Err(_), Err(_)) => {}
                (r, s) => panic!(
                    "{short}… (version {version}): Rust {:?}, SQL {:?}",
                    r.map(|x| x.1),
                    s.map(|x| x.1)
                ),
            }
        }
    }
}
