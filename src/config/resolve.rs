//! Secret resolution at load time: each secret is given exactly one way (literal,
//! `*_env`, `*_file`); environment variables and files are read here, file contents lose
//! their trailing newline, and the database password is injected into `database.url`.
//! Missing variables and unreadable files are reported against the key that names them.

use std::path::Path;

use super::origins::EnvSnapshot;
use super::report::Report;
use super::secret::{looks_like_secret, url_has_password, Secret};
use super::sections::DatabaseConfig;
use super::Config;

/// How one secret was given.
enum Resolved {
    /// Not given at all.
    Absent,
    /// Given, but could not be read (already reported).
    Failed,
    /// Given as a variable or file, and not needed by this command: not read.
    Skipped,
    /// A literal in the configuration.
    Literal(Secret),
    /// Read from an environment variable or a file.
    External(Secret),
}

/// The three ways of giving one secret, under the table at `prefix`.
struct Slot<'a> {
    prefix: &'a str,
    field: &'a str,
    /// Whether `field` itself may hold a literal (the database password may not).
    literal_allowed: bool,
    literal: Option<&'a Secret>,
    env_var: Option<&'a str>,
    file: Option<&'a Path>,
}

/// Which secrets a command needs resolved at load. A secret that is not needed is still
/// checked for shape (given exactly one way), but an unset variable or unreadable file
/// behind it is no error: the value simply stays unresolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretNeeds {
    /// Every secret (`outboxd run`).
    All,
    /// Only the database password (commands that work on the database directly).
    DatabaseOnly,
    /// None (`outboxd config check --no-secrets`).
    Nothing,
}

impl SecretNeeds {
    fn database(self) -> bool {
        self != SecretNeeds::Nothing
    }

    fn others(self) -> bool {
        self == SecretNeeds::All
    }
}

/// Resolves the secrets in `config` that `needs` asks for in place, reporting problems and
/// warnings.
pub(crate) fn resolve_secrets(
    config: &mut Config,
    env: &EnvSnapshot,
    needs: SecretNeeds,
    report: &mut Report<'_>,
) {
    resolve_database(&mut config.database, env, needs.database(), report);
    resolve_tokens(config, env, needs.others(), report);
    resolve_providers(config, env, needs.others(), report);
}

fn resolve_slot(
    slot: &Slot<'_>,
    env: &EnvSnapshot,
    required: bool,
    report: &mut Report<'_>,
) -> Resolved {
    let given = [
        slot.literal.is_some(),
        slot.env_var.is_some(),
        slot.file.is_some(),
    ];
    if given.iter().filter(|g| **g).count() > 1 {
        let f = slot.field;
        let message = if slot.literal_allowed {
            format!("set only one of {f}, {f}_env and {f}_file")
        } else {
            format!("set only one of {f}_env and {f}_file")
        };
        report.error(slot.prefix, message);
        return Resolved::Failed;
    }
    if let Some(value) = slot.literal {
        return Resolved::Literal(value.clone());
    }
    if !required && (slot.env_var.is_some() || slot.file.is_some()) {
        return Resolved::Skipped;
    }
    if let Some(var) = slot.env_var {
        let key = format!("{}.{}_env", slot.prefix, slot.field);
        return match env.get(var) {
            Some(value) if !value.is_empty() => Resolved::External(Secret::new(value.clone())),
            Some(_) => fail(report, key, format!("environment variable {var} is empty")),
            None => fail(
                report,
                key,
                format!("environment variable {var} is not set"),
            ),
        };
    }
    if let Some(path) = slot.file {
        let key = format!("{}.{}_file", slot.prefix, slot.field);
        return match read_secret_file(path) {
            Ok(text) => {
                let value = text.trim_end_matches(['\n', '\r']);
                if value.is_empty() {
                    fail(report, key, format!("file {} is empty", path.display()))
                } else {
                    Resolved::External(Secret::new(value))
                }
            }
            Err(e) => fail(report, key, format!("cannot read {}: {e}", path.display())),
        };
    }
    Resolved::Absent
}

fn fail(report: &mut Report<'_>, key: String, message: String) -> Resolved {
    report.error(key, message);
    Resolved::Failed
}

fn resolve_database(
    db: &mut DatabaseConfig,
    env: &EnvSnapshot,
    required: bool,
    report: &mut Report<'_>,
) {
    let slot = Slot {
        prefix: "database",
        field: "password",
        literal_allowed: false,
        literal: None,
        env_var: db.password_env.as_deref(),
        file: db.password_file.as_deref(),
    };
    match resolve_slot(&slot, env, required, report) {
        Resolved::External(password) => inject_password(db, &password, report),
        Resolved::Absent => {
            if url_has_password(&db.url) {
                report.warn(
                    "database.url",
                    "contains a password; prefer password_env or password_file so it stays \
                     out of the configuration file",
                );
            }
        }
        Resolved::Failed | Resolved::Skipped | Resolved::Literal(_) => {}
    }
}

fn inject_password(db: &mut DatabaseConfig, password: &Secret, report: &mut Report<'_>) {
    let source = if db.password_env.is_some() {
        "database.password_env"
    } else {
        "database.password_file"
    };
    if !db.is_postgres() {
        report.error(source, "only a postgres:// database.url takes a password");
        return;
    }
    let Ok(mut url) = url::Url::parse(&db.url) else {
        return; // validation reports the unparseable URL
    };
    if url_has_password(&db.url) {
        report.error(
            "database.url",
            format!("already contains a password; remove it or remove {source}"),
        );
        return;
    }
    if url.username().is_empty() {
        report.error(
            "database.url",
            "names no user for the password; write postgres://USER@HOST/DB",
        );
        return;
    }
    if url.set_password(Some(password.expose())).is_err() {
        report.error("database.url", "cannot carry a password");
        return;
    }
    db.url = url.to_string();
}

fn resolve_tokens(config: &mut Config, env: &EnvSnapshot, required: bool, report: &mut Report<'_>) {
    for (i, token) in config.admin.tokens.iter_mut().enumerate() {
        let prefix = format!("admin.tokens[{i}]");
        let slot = Slot {
            prefix: &prefix,
            field: "token",
            literal_allowed: true,
            literal: token.token.as_ref(),
            env_var: token.token_env.as_deref(),
            file: token.token_file.as_deref(),
        };
        match resolve_slot(&slot, env, required, report) {
            Resolved::Absent => report.error(prefix, "needs one of token_env, token_file or token"),
            Resolved::Failed | Resolved::Skipped => {}
            Resolved::Literal(_) => report.warn(
                format!("{prefix}.token"),
                "a literal token in the configuration is discouraged; use token_env or \
                 token_file so the secret stays out of the file",
            ),
            Resolved::External(secret) => token.token = Some(secret),
        }
    }
}

fn resolve_providers(
    config: &mut Config,
    env: &EnvSnapshot,
    required: bool,
    report: &mut Report<'_>,
) {
    for (name, provider) in &mut config.providers {
        for (header, value) in &mut provider.headers {
            let prefix = format!("providers.{name}.headers.{header}");
            let slot = Slot {
                prefix: &prefix,
                field: "value",
                literal_allowed: true,
                literal: value.value.as_ref(),
                env_var: value.value_env.as_deref(),
                file: value.value_file.as_deref(),
            };
            match resolve_slot(&slot, env, required, report) {
                Resolved::Absent => {
                    report.error(prefix, "needs one of value, value_env or value_file")
                }
                Resolved::Literal(v) if looks_like_secret(header, v.expose()) => report.warn(
                    format!("{prefix}.value"),
                    "looks like a credential; use value_env or value_file so it stays out of \
                     the configuration file",
                ),
                Resolved::External(secret) => value.value = Some(secret),
                Resolved::Literal(_) | Resolved::Failed | Resolved::Skipped => {}
            }
        }
        if let Some(signing) = &mut provider.signing {
            let prefix = format!("providers.{name}.signing");
            let slot = Slot {
                prefix: &prefix,
                field: "secret",
                literal_allowed: true,
                literal: signing.secret.as_ref(),
                env_var: signing.secret_env.as_deref(),
                file: signing.secret_file.as_deref(),
            };
            match resolve_slot(&slot, env, required, report) {
                Resolved::Absent => {
                    report.error(prefix, "needs one of secret_env, secret_file or secret")
                }
                Resolved::Literal(_) => report.warn(
                    format!("{prefix}.secret"),
                    "a literal signing secret is discouraged; use secret_env or secret_file",
                ),
                Resolved::External(secret) => signing.secret = Some(secret),
                Resolved::Failed | Resolved::Skipped => {}
            }
        }
    }
}

/// Largest secret file accepted (a guard against pointing `*_file` at a device or a log).
const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

fn read_secret_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    let file = std::fs::File::open(path)?;
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_SECRET_FILE_BYTES} bytes; is this the right file?"
        )));
    }
    Ok(text)
}
