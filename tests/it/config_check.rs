//! `outboxd config check` as an operator runs it: the real binary on real files. Every
//! kind of bad configuration exits non-zero with a message naming the offending key (or,
//! for unparseable TOML, the position) and its source; a good file prints the effective
//! configuration with every secret as `[REDACTED]` and the secret's value nowhere.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A valid provider and keyed action the cases build on.
const BASE: &str = r#"
[providers.pay]
base_url = "https://pay.example.com"
[actions.refund]
provider = "pay"
path = "/v1/refunds"
retry_safety = "idempotent_with_key"
"#;

struct Checked {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `outboxd config check --config <file>` with exactly `env` as the environment.
fn check_file(path: &Path, env: &[(&str, &str)]) -> Checked {
    check_with(path, &[], env)
}

/// Runs `outboxd config check <flags> --config <file>` with exactly `env`.
fn check_with(path: &Path, flags: &[&str], env: &[(&str, &str)]) -> Checked {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_outboxd"))
        .args(["config", "check"])
        .args(flags)
        .arg("--config")
        .arg(path)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run outboxd config check");
    Checked {
        ok: status.success(),
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn check_text(text: &str, env: &[(&str, &str)]) -> (Checked, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outboxd.toml");
    std::fs::write(&path, text).unwrap();
    (check_file(&path, env), dir, path)
}

/// Asserts a non-zero exit whose stderr has `error: <key>: ...` mentioning each of
/// `mentions`, and names the file as the source.
fn assert_rejected(text: &str, env: &[(&str, &str)], key: &str, mentions: &[&str]) {
    let (checked, _dir, path) = check_text(text, env);
    assert!(
        !checked.ok,
        "accepted a bad config; stderr:\n{}",
        checked.stderr
    );
    let line = checked
        .stderr
        .lines()
        .find(|l| l.starts_with(&format!("error: {key}")))
        .unwrap_or_else(|| panic!("no error naming {key:?}; stderr:\n{}", checked.stderr));
    for m in mentions {
        assert!(line.contains(m), "{line:?} does not mention {m:?}");
    }
    if env.is_empty() {
        assert!(
            line.contains(&path.display().to_string()),
            "{line:?} names no source"
        );
    }
    assert!(checked.stdout.is_empty(), "printed a config for a bad file");
}

#[test]
fn malformed_toml_names_the_position() {
    assert_rejected("[database\nurl = 1\n", &[], "TOML parse error", &["line 1"]);
}

#[test]
fn unknown_key_is_an_error() {
    let text = format!("{BASE}\n[dispatcher]\nbatchsize = 5\n");
    assert_rejected(
        &text,
        &[],
        "dispatcher.batchsize",
        &["unknown key", "batch_size"],
    );
}

#[test]
fn bad_url_is_an_error() {
    let text = BASE.replace("https://pay.example.com", "htp:/pay");
    assert_rejected(
        &text,
        &[],
        "providers.pay.base_url",
        &["htp:/pay", "not a valid"],
    );
}

#[test]
fn unknown_provider_in_an_action_is_an_error() {
    let text = format!(
        "{BASE}\n[actions.notify]\nprovider = \"nope\"\npath = \"/n\"\nretry_safety = \"not_idempotent\"\n"
    );
    assert_rejected(
        &text,
        &[],
        "actions.notify.provider",
        &["\"nope\"", "[providers]"],
    );
}

#[test]
fn bad_duration_is_an_error() {
    let text = format!("{BASE}\n[dispatcher]\nlease = \"30 parsecs\"\n");
    assert_rejected(&text, &[], "dispatcher.lease", &["30 parsecs", "duration"]);
}

#[test]
fn missing_secret_variable_is_an_error() {
    let text = format!(
        "{BASE}\n[providers.pay.headers]\nAuthorization = {{ value_env = \"OBX_TEST_MISSING\" }}\n"
    );
    assert_rejected(
        &text,
        &[],
        "providers.pay.headers.Authorization.value_env",
        &["OBX_TEST_MISSING", "not set"],
    );
}

#[test]
fn invalid_enum_value_is_an_error() {
    let text = BASE.replace("\"idempotent_with_key\"", "\"sometimes\"");
    assert_rejected(
        &text,
        &[],
        "actions.refund.retry_safety",
        &["sometimes", "not_idempotent"],
    );
    let text = format!("{BASE}\n[logging]\nformat = \"xml\"\n");
    assert_rejected(&text, &[], "logging.format", &["xml", "json"]);
}

#[test]
fn bad_cron_is_an_error() {
    let text = format!("{BASE}\n[retention]\nschedule = \"every tuesday\"\n");
    assert_rejected(&text, &[], "retention.schedule", &["every tuesday", "6"]);
}

#[test]
fn bad_environment_override_names_the_variable() {
    let env = [("OUTBOXD__DISPATCHER__BATCH_SIZE", "0")];
    assert_rejected(
        BASE,
        &env,
        "dispatcher.batch_size",
        &["OUTBOXD__DISPATCHER__BATCH_SIZE"],
    );
}

#[test]
fn good_file_prints_the_effective_config_with_secrets_redacted() {
    let text = format!(
        "{BASE}\n[providers.pay.headers]\nAuthorization = {{ value_env = \"PAY_AUTH\" }}\n\
         [providers.pay.signing]\nsecret_env = \"PAY_SIGNING\"\n\
         [[admin.tokens]]\nname = \"ops\"\ntoken_env = \"OPS_TOKEN\"\nrole = \"operator\"\ntenants = [\"*\"]\n"
    );
    let secrets = [
        ("PAY_AUTH", "Bearer sk_live_do_not_print_4242"),
        ("PAY_SIGNING", "whsec_c2VjcmV0LXNpZ25pbmcta2V5LTk5"),
        ("OPS_TOKEN", "ops-token-do-not-print-0123456789"),
        (
            "OUTBOXD__DATABASE__URL",
            "postgres://outboxd:pg-pass-do-not-print@db.internal/outbox",
        ),
    ];
    let (checked, _dir, _) = check_text(&text, &secrets);
    assert!(checked.ok, "stderr:\n{}", checked.stderr);
    assert!(
        checked.stderr.contains("configuration OK"),
        "{}",
        checked.stderr
    );
    assert!(
        checked.stdout.contains("[providers.pay]"),
        "{}",
        checked.stdout
    );
    assert!(checked.stdout.contains("[REDACTED]"), "{}", checked.stdout);
    for (_, value) in &secrets[..3] {
        assert!(
            !checked.stdout.contains(value),
            "secret in stdout:\n{}",
            checked.stdout
        );
        assert!(
            !checked.stderr.contains(value),
            "secret in stderr:\n{}",
            checked.stderr
        );
    }
    let everything = format!("{}{}", checked.stdout, checked.stderr);
    assert!(!everything.contains("pg-pass-do-not-print"), "{everything}");
}

#[test]
fn retry_deadline_beyond_key_retention_is_a_warning_that_explains() {
    let text = format!("{BASE}\n[actions.refund.retry]\ndeadline = \"48h\"\n");
    let (checked, _dir, _) = check_text(&text, &[]);
    assert!(
        checked.ok,
        "a warning must not fail the check: {}",
        checked.stderr
    );
    let warning = checked
        .stderr
        .lines()
        .find(|l| l.starts_with("warning: actions.refund.retry.deadline"))
        .unwrap_or_else(|| panic!("no warning; stderr:\n{}", checked.stderr));
    assert!(warning.contains("key_retention"), "{warning}");
    assert!(warning.contains("reconciliation"), "{warning}");
    assert!(checked.stderr.contains("configuration OK (1 warning(s))"));
}

#[test]
fn quickstart_config_loads_on_a_fresh_clone() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/quickstart.toml");
    let checked = check_file(&path, &[]);
    assert!(checked.ok, "stderr:\n{}", checked.stderr);
    assert!(
        checked.stderr.contains("configuration OK (0 warning(s))"),
        "{}",
        checked.stderr
    );
    assert!(checked.stdout.contains("[actions.send_notification]"));
}

/// Runs `config check` on `text` and returns the warning lines; the check must pass.
fn warnings_of(text: &str) -> Vec<String> {
    let (checked, _dir, _) = check_text(text, &[]);
    assert!(
        checked.ok,
        "a warning must not fail the check: {}",
        checked.stderr
    );
    checked
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn settings_that_cannot_help_are_warned_about_once() {
    let text = format!(
        "[dispatcher]\nbatch_size = 100\nconcurrency = 16\nlease = \"12s\"\nshutdown_grace = \"5s\"\n{}",
        BASE.replace(
            "base_url = \"https://pay.example.com\"\n",
            "base_url = \"https://pay.example.com\"\nmax_in_flight = 64\nrequest_timeout = \"10s\"\n",
        )
    );
    let warnings = warnings_of(&text);
    let find = |prefix: &str| {
        let hits: Vec<_> = warnings.iter().filter(|w| w.starts_with(prefix)).collect();
        assert_eq!(hits.len(), 1, "one {prefix} warning; got {warnings:#?}");
        hits[0].clone()
    };
    let batch = find("warning: dispatcher.batch_size");
    assert!(batch.contains("concurrency (16)"), "{batch}");
    let in_flight = find("warning: providers.pay.max_in_flight");
    assert!(in_flight.contains("concurrency (16)"), "{in_flight}");
    let lease = find("warning: dispatcher.lease");
    assert!(lease.contains("barely above"), "{lease}");
    assert!(lease.contains("request_timeout (10s)"), "{lease}");
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
}

#[test]
fn sensible_tuning_and_the_defaults_do_not_warn() {
    let tuned = format!(
        "[dispatcher]\nbatch_size = 32\nconcurrency = 64\nlease = \"30s\"\n{}",
        BASE.replace(
            "base_url = \"https://pay.example.com\"\n",
            "base_url = \"https://pay.example.com\"\nmax_in_flight = 32\nrequest_timeout = \"10s\"\n",
        )
    );
    assert_eq!(warnings_of(&tuned), Vec::<String>::new());
    assert_eq!(warnings_of(BASE), Vec::<String>::new());
}

#[test]
fn lowering_concurrency_alone_does_not_warn_about_the_default_batch_size() {
    // An upgrade that pinned concurrency = 128 leaves batch_size at its default (200).
    let pinned = format!(
        "[dispatcher]\nconcurrency = 128\n{}",
        BASE.replace(
            "base_url = \"https://pay.example.com\"\n",
            "base_url = \"https://pay.example.com\"\nmax_in_flight = 64\n",
        )
    );
    assert_eq!(warnings_of(&pinned), Vec::<String>::new());
}

/// A second provider for [`BASE`], with `extra` lines.
fn with_second_provider(extra: &str) -> String {
    format!(
        "{BASE}[providers.mail]\nbase_url = \"https://mail.example.com\"\n{extra}\n\
         [actions.notify]\nprovider = \"mail\"\npath = \"/v1/send\"\n\
         retry_safety = \"idempotent_with_key\"\n"
    )
}

#[test]
fn providers_sharing_more_slots_than_there_are_is_warned_about() {
    // 200 + the other's default share (256 / 2 = 128) = 328 slots wanted, 256 there.
    let over = with_second_provider("max_in_flight = 200");
    let warnings = warnings_of(&over);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("warning: dispatcher.concurrency: 256 is below the providers' max_in_flight added up (328)"),
        "{warnings:#?}"
    );
    // Within the slots, and the defaults (128 + 128), say nothing.
    assert_eq!(
        warnings_of(&with_second_provider("max_in_flight = 64")),
        Vec::<String>::new()
    );
    assert_eq!(warnings_of(&with_second_provider("")), Vec::<String>::new());
}

/// The exit code of a configuration error (`docs/cli.md`).
const CONFIG_ERROR: i32 = 3;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join(name)
}

/// Every secret the PostgreSQL example names, with values that validate.
const EXAMPLE_SECRETS: [(&str, &str); 6] = [
    ("OUTBOXD_DB_PASSWORD", "pg-pass-do-not-print"),
    ("OUTBOXD_TOKEN_ALICE", "alice-token-do-not-print-0123456789"),
    (
        "OUTBOXD_TOKEN_SUPPORT_DASHBOARD",
        "support-token-do-not-print-012345",
    ),
    ("PAYMENTS_AUTH", "Bearer sk_live_do_not_print_4242"),
    (
        "PAYMENTS_WEBHOOK_SECRET",
        "whsec_c2VjcmV0LXNpZ25pbmcta2V5LTk5",
    ),
    ("SUPPORT_API_TOKEN", "Bearer support-do-not-print"),
];

#[test]
fn postgres_example_needs_its_secrets_unless_no_secrets() {
    let path = example("postgres.example.toml");
    let without = check_file(&path, &[]);
    assert_eq!(without.code, Some(CONFIG_ERROR), "{}", without.stderr);
    assert!(without.stderr.contains("is not set"), "{}", without.stderr);
    let checked = check_with(&path, &["--no-secrets"], &[]);
    assert!(checked.ok, "stderr:\n{}", checked.stderr);
    assert!(
        checked.stderr.contains("secrets were not read"),
        "{}",
        checked.stderr
    );
    assert!(checked
        .stdout
        .contains("password_env = \"OUTBOXD_DB_PASSWORD\""));
    // The shape of each secret is still checked: two ways at once is an error.
    let dir = tempfile::tempdir().unwrap();
    let twice = dir.path().join("twice.toml");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "password_env = \"OUTBOXD_DB_PASSWORD\"",
        "password_env = \"OUTBOXD_DB_PASSWORD\"\npassword_file = \"/run/secrets/pg\"",
    );
    std::fs::write(&twice, text).unwrap();
    let checked = check_with(&twice, &["--no-secrets"], &[]);
    assert_eq!(checked.code, Some(CONFIG_ERROR), "{}", checked.stderr);
    assert!(
        checked.stderr.contains("set only one of"),
        "{}",
        checked.stderr
    );
}

#[test]
fn strict_turns_warnings_into_errors() {
    let text = format!("{BASE}\n[actions.refund.retry]\ndeadline = \"48h\"\n");
    let (lenient, _dir, path) = check_text(&text, &[]);
    assert!(lenient.ok, "{}", lenient.stderr);
    let strict = check_with(&path, &["--strict"], &[]);
    assert_eq!(strict.code, Some(CONFIG_ERROR), "{}", strict.stderr);
    assert!(strict
        .stderr
        .contains("warning: actions.refund.retry.deadline"));
    assert!(strict.stderr.contains("--strict"), "{}", strict.stderr);
    assert!(
        strict.stdout.is_empty(),
        "no config printed: {}",
        strict.stdout
    );
    let json = check_with(&path, &["--strict", "--json"], &[]);
    assert_eq!(json.code, Some(CONFIG_ERROR));
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("one JSON object");
    assert_eq!(report["ok"], false);
    assert_eq!(report["strict"], true);
    assert_eq!(report["warnings"].as_array().unwrap().len(), 1);
}

#[test]
fn json_report_has_errors_with_keys_and_origins() {
    let text = format!("{BASE}\n[dispatcher]\nbatch_size = 0\n");
    let (_, _dir, path) = check_text(&text, &[]);
    let checked = check_with(&path, &["--json"], &[]);
    assert_eq!(checked.code, Some(CONFIG_ERROR), "{}", checked.stderr);
    let report: serde_json::Value = serde_json::from_str(&checked.stdout).expect("JSON");
    assert_eq!(report["ok"], false);
    assert_eq!(report["config"], serde_json::Value::Null);
    let error = &report["errors"][0];
    assert_eq!(error["key"], "dispatcher.batch_size");
    assert!(error["origin"].as_str().unwrap().contains("outboxd.toml"));
    let good = check_with(&example("quickstart.toml"), &["--json"], &[]);
    assert!(good.ok, "{}", good.stderr);
    let report: serde_json::Value = serde_json::from_str(&good.stdout).expect("JSON");
    assert_eq!(report["ok"], true);
    assert_eq!(report["errors"], serde_json::json!([]));
    assert!(report["config"]["actions"]["send_notification"].is_object());
}

/// Prints `path`'s configuration, writes it to a file and checks that; returns both prints.
fn print_twice(path: &Path, flags: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let first = check_with(path, flags, env);
    assert!(first.ok, "stderr:\n{}", first.stderr);
    let dir = tempfile::tempdir().unwrap();
    let printed = dir.path().join("printed.toml");
    std::fs::write(&printed, &first.stdout).unwrap();
    let second = check_with(&printed, flags, env);
    assert!(
        second.ok,
        "the printed config does not load:\n{}\n{}",
        second.stderr, first.stdout
    );
    (first.stdout, second.stdout)
}

#[test]
fn printed_config_reads_back_the_same() {
    for name in [
        "postgres.example.toml",
        "sqlite.example.toml",
        "quickstart.toml",
    ] {
        let (first, again) = print_twice(&example(name), &[], &EXAMPLE_SECRETS);
        assert_eq!(first, again, "{name}: print → parse → print differs");
        for (_, secret) in EXAMPLE_SECRETS {
            assert!(!first.contains(secret), "{name}: a secret was printed");
        }
        let (first, again) = print_twice(&example(name), &["--no-secrets"], &[]);
        assert_eq!(
            first, again,
            "{name} (--no-secrets): print → parse → print differs"
        );
    }
}
