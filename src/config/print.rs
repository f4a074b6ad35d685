//! The configuration as `outboxd config check` prints it: TOML that reads back into the
//! same configuration. A secret given as `*_env` or `*_file` is printed as that reference
//! (not as its resolved value), so the printed file loads again wherever the variables
//! and files exist; a literal secret prints as `"[REDACTED]"` and does not read back.

use super::Config;

/// `config` with every secret given as a variable or file reduced to that reference.
pub(crate) fn printable(config: &Config) -> Config {
    let mut printed = config.clone();
    unresolve_secrets(&mut printed);
    printed
}

/// `config` as TOML with every secret printed as its source.
pub(crate) fn to_toml(config: &Config) -> String {
    toml::to_string_pretty(&printable(config))
        .unwrap_or_else(|e| format!("# cannot render the configuration as TOML: {e}\n"))
}

/// Drops every resolved value whose source (a variable or a file) is named next to it,
/// and the password injected into `database.url` from `password_env`/`password_file`.
fn unresolve_secrets(config: &mut Config) {
    let db = &mut config.database;
    if db.password_env.is_some() || db.password_file.is_some() {
        if let Ok(mut url) = url::Url::parse(&db.url) {
            if url.password().is_some() && url.set_password(None).is_ok() {
                db.url = url.to_string();
            }
        }
    }
    for token in &mut config.admin.tokens {
        if token.token_env.is_some() || token.token_file.is_some() {
            token.token = None;
        }
    }
    for provider in config.providers.values_mut() {
        for value in provider.headers.values_mut() {
            if value.value_env.is_some() || value.value_file.is_some() {
                value.value = None;
            }
        }
        if let Some(signing) = &mut provider.signing {
            if signing.secret_env.is_some() || signing.secret_file.is_some() {
                signing.secret = None;
            }
        }
    }
}
