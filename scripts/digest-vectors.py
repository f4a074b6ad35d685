#!/usr/bin/env python3
"""Regenerates tests/it/digest_vectors.json: the canonical payload and sha256 of each vector,
computed here in Python, independently of outboxd's Rust and SQL implementations (which
tests/it/digest_vectors.rs checks against this file). Canonical form: see
docs/producers.md, "Payload digest". Usage: python3 scripts/digest-vectors.py > tests/it/digest_vectors.json"""
import hashlib
import hmac
import json
from decimal import Decimal, getcontext

getcontext().prec = 1_000_000  # exact: normalize() must never round

PAYLOADS = [
    ("issue_refund", 1, '{"amount": 1250, "currency": "EUR", "order_id": "o-7"}'),
    ("issue_refund", 1, '{ "order_id":"o-7","currency" : "EUR",\n  "amount":1250 }'),
    ("issue_refund", 2, '{"amount": 1250, "currency": "EUR", "order_id": "o-7"}'),
    ("create_support_task", 1, '{}'),
    ("create_support_task", 1, '{"subject": "Check delayed delivery", "tags": ["shipping", "urgent"], "meta": {"z": null, "a": true, "m": false}}'),
    ("numbers", 1, '{"a": 1.0, "b": 1e2, "c": -0.0, "d": 0.1, "e": 1.5e-7, "f": 1e21, "g": 18446744073709551616, "h": -5, "i": 12.50, "j": 9007199254740993, "k": -9223372036854775808, "l": 3.141592653589793238}'),
    ("strings", 1, '{"s": "caf\\u00e9 \\u001f \\"q\\" \\\\ / \\n\\t\\r\\b\\f \\u2028 \\ud83d\\ude00 \\u007f"}'),
    ("keys", 1, '{"b": 1, "a": 2, "B": 3, "é": 4, "aa": 5, "": 6, "z\\u00e9": 7, "\\ud83d\\ude00": 8, "\\uff5e": 9}'),
    ("nested", 1, '{"x": [[], {}, [1, [2, [3]]], {"k": [{"b": 2, "a": 1}]}]}'),
    # Big and high-precision numbers: every digit counts, never rounded through a float.
    ("numbers", 1, '{"a": 9007199254740993.0, "b": 9007199254740993e0, "c": 90071992547409930e-1}'),
    ("numbers", 1, '{"p": 1.234567890123456789, "q": 123456789012345678901234567890, "r": 1.2345678901234567}'),
    ("numbers", 1, '{"amount": 1.0000000000000000001, "other": 1.0000000000000000002}'),
    ("numbers", 1, '{"e": 1.50E+3, "f": -12.3400e-1, "g": 0.000E+5, "h": 1e-30, "i": -0, "j": 1E400}'),
    ("numbers", 1, '{"big": 340282366920938463463374607431768211457, "neg": -18446744073709551617.000}'),
    # Duplicate keys keep the last value.
    ("numbers", 1, '{"a": 1, "a": 2}'),
]

KEY_VECTORS = [
    ("00" * 32, "acme", "refund-7"),
    ("00" * 32, "evil", "refund-7"),
    ("0f" * 32, "acme", "obx1_1de90255e907db1b3c63c6b26cd79eb581c5029bda07c1d783772db7c19c7f62"),
    ("a1b2c3d4" * 8, "tenant é", "key with spaces"),
]


def number(d: Decimal) -> str:
    if d == 0:
        return "0"
    text = format(d.normalize(), "f")
    return text


def string(s: str) -> str:
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\b":
            out.append("\\b")
        elif c == "\f":
            out.append("\\f")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20:
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def canonical(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, Decimal):
        return number(v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, list):
        return "[" + ",".join(canonical(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(string(k) + ":" + canonical(v[k]) for k in sorted(v)) + "}"
    raise TypeError(v)


def parse(text: str):
    return json.loads(text, parse_float=Decimal, parse_int=Decimal, object_pairs_hook=dict)


def vector(action, version, text):
    payload = canonical(parse(text))
    whole = "{\"action\":" + string(action) + ",\"payload\":" + payload + ",\"payload_version\":" + str(version) + "}"
    return {
        "action": action,
        "payload_version": version,
        "payload_json": text,
        "canonical_payload": payload,
        "sha256": hashlib.sha256(whole.encode("utf-8")).hexdigest(),
    }


def key_vector(secret, tenant, key):
    message = b"outboxd.wire-key.v2\0" + tenant.encode() + b"\0" + key.encode()
    wire = "obx2_" + hmac.new(bytes.fromhex(secret), message, hashlib.sha256).hexdigest()
    return {"key_secret": secret, "tenant": tenant, "key": key, "wire_key": wire}


print(json.dumps({
    "about": "Shared vectors, computed by scripts/digest-vectors.py (Python, independent of outboxd): canonical payload and sha256 of the canonical {action, payload, payload_version} object; and the key the provider sees for a (secret, tenant, key). Checked against Rust and PostgreSQL (tests/it/digest_vectors.rs).",
    "vectors": [vector(*p) for p in PAYLOADS],
    "wire_keys": [key_vector(*k) for k in KEY_VECTORS],
}, indent=1, ensure_ascii=False))
