//! Secrets: resolved from the environment or a file, never printed.

use std::io::Write;

use super::{load_err, load_ok, problem_at, BASE};

const ALICE: &str = "alice-token-0123456789abcdef";
const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn secret_file(contents: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(contents.as_bytes()).unwrap();
    file
}

fn assert_hidden(text: &str, secret: &str) {
    assert!(!text.contains(secret), "secret leaked:\n{text}");
}

#[test]
fn token_from_env_is_resolved_and_redacted() {
    let toml = "[[admin.tokens]]\nname = \"ops-alice\"\ntoken_env = \"OUTBOXD_TOKEN_ALICE\"\nrole = \"operator\"\ntenants = [\"*\"]\n";
    let loaded = load_ok(toml, &[("OUTBOXD_TOKEN_ALICE", ALICE)]);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let config = loaded.config;
    assert_eq!(
        config.admin.tokens[0].token.as_ref().unwrap().expose(),
        ALICE
    );
    assert_hidden(&format!("{config:?}"), ALICE);
    assert_hidden(&format!("{config:#?}"), ALICE);
    // Printed as its source, so the printed configuration reads back.
    let effective = config.effective_toml_redacted();
    assert_hidden(&effective, ALICE);
    assert!(!effective.contains("token ="), "{effective}");
    assert!(
        effective.contains("token_env = \"OUTBOXD_TOKEN_ALICE\""),
        "{effective}"
    );
}

#[test]
fn secrets_from_files_lose_the_trailing_newline_and_are_redacted() {
    let token = secret_file(&format!("{ALICE}\n"));
    let auth = secret_file("Bearer sk_live_abcdef0123456789\r\n");
    let signing = secret_file(&format!("{WHSEC}\n"));
    let toml = format!(
        "{BASE}\n[[admin.tokens]]\nname = \"a\"\ntoken_file = {:?}\nrole = \"viewer\"\ntenants = [\"acme\"]\n\
         [providers.payments.headers]\nAuthorization = {{ value_file = {:?} }}\n\
         [providers.payments.signing]\nsecret_file = {:?}\n",
        token.path(),
        auth.path(),
        signing.path()
    );
    let config = load_ok(&toml, &[]).config;
    assert_eq!(
        config.admin.tokens[0].token.as_ref().unwrap().expose(),
        ALICE
    );
    let payments = &config.providers["payments"];
    let headers: Vec<_> = payments.resolved_headers().collect();
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0].1.expose(), "Bearer sk_live_abcdef0123456789");
    assert_eq!(payments.signing.as_ref().unwrap().key().unwrap().len(), 24);
    for shown in [format!("{config:?}"), config.effective_toml_redacted()] {
        assert_hidden(&shown, ALICE);
        assert_hidden(&shown, "sk_live");
        assert_hidden(&shown, "MfKQ9r8");
    }
}

#[test]
fn missing_variables_and_unreadable_files_name_the_key() {
    let toml = format!(
        "{BASE}\n[[admin.tokens]]\nname = \"a\"\ntoken_env = \"NOPE_TOKEN\"\nrole = \"viewer\"\ntenants = [\"*\"]\n\
         [providers.payments.headers]\nAuthorization = {{ value_file = \"/nonexistent/auth\" }}\n\
         [providers.payments.signing]\nsecret_env = \"EMPTY_SECRET\"\n"
    );
    let error = load_err(&toml, &[("EMPTY_SECRET", "")]);
    assert_eq!(
        error
            .problems
            .iter()
            .find(|p| p.key == "admin.tokens[0].token_env")
            .unwrap()
            .to_string(),
        "admin.tokens[0].token_env: environment variable NOPE_TOKEN is not set (from inline TOML)"
    );
    let message = problem_at(
        &error,
        "providers.payments.headers.Authorization.value_file",
    );
    assert!(
        message.starts_with("cannot read /nonexistent/auth"),
        "{message}"
    );
    let message = problem_at(&error, "providers.payments.signing.secret_env");
    assert_eq!(message, "environment variable EMPTY_SECRET is empty");
}

#[test]
fn a_secret_is_given_exactly_one_way() {
    let toml = format!("[[admin.tokens]]\nname = \"a\"\ntoken = \"{ALICE}\"\ntoken_env = \"T\"\nrole = \"viewer\"\ntenants = [\"*\"]\n");
    let error = load_err(&toml, &[("T", ALICE)]);
    assert_eq!(
        problem_at(&error, "admin.tokens[0]"),
        "set only one of token, token_env and token_file"
    );
    let toml = format!("{BASE}\n[providers.payments.signing]\n");
    assert!(
        problem_at(&load_err(&toml, &[]), "providers.payments.signing").contains("needs one of")
    );
}

#[test]
fn signing_secrets_must_be_whsec_base64() {
    for (secret, fragment) in [
        ("MfKQ9r8GKYqrTwjU", "must start with \"whsec_\""),
        ("whsec_***", "base64"),
        ("whsec_", "empty key"),
    ] {
        let toml = format!("{BASE}\n[providers.payments.signing]\nsecret_env = \"S\"\n");
        let error = load_err(&toml, &[("S", secret)]);
        let message = problem_at(&error, "providers.payments.signing.secret");
        assert!(message.contains(fragment), "{message}");
        assert_hidden(&error.to_string(), "MfKQ9r8");
    }
}

#[test]
fn literal_credentials_are_warned_about() {
    let toml = format!(
        "{BASE}\n[[admin.tokens]]\nname = \"a\"\ntoken = \"{ALICE}\"\nrole = \"viewer\"\ntenants = [\"*\"]\n\
         [providers.payments.headers]\nX-Api-Key = {{ value = \"k-123\" }}\nAccept = {{ value = \"application/json\" }}\n\
         [providers.payments.signing]\nsecret = \"{WHSEC}\"\n"
    );
    let warnings = load_ok(&toml, &[]).warnings;
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("admin.tokens[0].token: a literal token"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("token_env or token_file"));
    assert!(warnings[1]
        .starts_with("providers.payments.headers.X-Api-Key.value: looks like a credential"));
    assert!(warnings[2].starts_with("providers.payments.signing.secret: a literal signing secret"));
    for w in &warnings {
        assert_hidden(w, ALICE);
    }
}

#[test]
fn database_password_is_injected_and_redacted() {
    let toml =
        "[database]\nurl = \"postgres://outboxd@db:5432/outbox\"\npassword_env = \"PGPASS\"\n";
    let config = load_ok(toml, &[("PGPASS", "p@ss:w/rd")]).config;
    assert_eq!(
        config.database.url,
        "postgres://outboxd:p%40ss%3Aw%2Frd@db:5432/outbox"
    );
    let expected = "postgres://outboxd:[REDACTED]@db:5432/outbox";
    assert!(format!("{config:?}").contains(expected));
    assert_hidden(&format!("{config:?}"), "p%40ss");
    // The injected password is left out of the printed URL: `password_env` brings it.
    let effective = config.effective_toml_redacted();
    assert!(
        effective.contains("url = \"postgres://outboxd@db:5432/outbox\""),
        "{effective}"
    );
    assert!(
        effective.contains("password_env = \"PGPASS\""),
        "{effective}"
    );
    assert_hidden(&effective, "p%40ss");
    assert_hidden(&effective, "REDACTED");

    let file = secret_file("from-file\n");
    let toml = format!(
        "[database]\nurl = \"postgresql://outboxd@db/outbox\"\npassword_file = {:?}\n",
        file.path()
    );
    assert_eq!(
        load_ok(&toml, &[]).config.database.url,
        "postgresql://outboxd:from-file@db/outbox"
    );
}

#[test]
fn database_password_rules() {
    let sqlite = "[database]\nurl = \"sqlite://x.db\"\npassword_env = \"P\"\n";
    assert!(
        problem_at(&load_err(sqlite, &[("P", "x")]), "database.password_env")
            .contains("only a postgres://")
    );
    let twice = "[database]\nurl = \"postgres://u:old@h/db\"\npassword_env = \"P\"\n";
    assert!(problem_at(&load_err(twice, &[("P", "x")]), "database.url")
        .contains("already contains a password"));
    let no_user = "[database]\nurl = \"postgres://h/db\"\npassword_env = \"P\"\n";
    assert!(
        problem_at(&load_err(no_user, &[("P", "x")]), "database.url").contains("names no user")
    );
    let both =
        "[database]\nurl = \"postgres://u@h/db\"\npassword_env = \"P\"\npassword_file = \"/x\"\n";
    assert!(problem_at(&load_err(both, &[("P", "x")]), "database").contains("set only one of"));
    let inline = "[database]\nurl = \"postgres://u:hunter2hunter2@h/db\"\n";
    let warnings = load_ok(inline, &[]).warnings;
    assert!(
        warnings[0].starts_with("database.url: contains a password"),
        "{warnings:?}"
    );
    assert_hidden(&warnings[0], "hunter2");

    let query = "[database]\nurl = \"postgres://u@h/db?password=hunter2hunter2\"\n";
    let loaded = load_ok(query, &[]);
    assert!(loaded.warnings[0].starts_with("database.url: contains a password"));
    assert_hidden(&format!("{:?}", loaded.config), "hunter2");
    assert_hidden(&loaded.config.effective_toml_redacted(), "hunter2");
    let with_env = format!("{query}password_env = \"P\"\n");
    let error = load_err(&with_env, &[("P", "x")]);
    assert!(problem_at(&error, "database.url").contains("already contains a password"));
    assert_hidden(&error.to_string(), "hunter2");
}
