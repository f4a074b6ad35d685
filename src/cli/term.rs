//! Colour on the terminal: only when the stream is a terminal and `NO_COLOR` is unset or
//! empty (<https://no-color.org>); `CLICOLOR_FORCE=1` turns it on for a stream that is not
//! a terminal (`NO_COLOR` still wins). Logs and the CLI's `error:`/`warning:` prefixes
//! follow the same rule.

use std::io::IsTerminal;

/// Whether output to stderr may use ANSI colours.
pub fn stderr_color() -> bool {
    color_for(std::io::stderr().is_terminal(), |name| {
        std::env::var(name).ok()
    })
}

/// The rule, over whether the stream is a terminal and a variable lookup.
pub fn color_for(is_terminal: bool, var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.is_empty());
    if set("NO_COLOR") {
        return false;
    }
    is_terminal || var("CLICOLOR_FORCE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// `label` (e.g. `error:`) in bold colour `sgr` (an SGR code: 31 red, 33 yellow) when
/// `color`, plain otherwise.
pub fn label(label: &str, sgr: u8, color: bool) -> String {
    if color {
        format!("\x1b[1;{sgr}m{label}\x1b[0m")
    } else {
        label.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn no_color_wins_and_pipes_are_plain() {
        assert!(color_for(true, env(&[])));
        assert!(!color_for(false, env(&[])));
        assert!(!color_for(true, env(&[("NO_COLOR", "1")])));
        assert!(color_for(true, env(&[("NO_COLOR", "")])));
        assert!(color_for(false, env(&[("CLICOLOR_FORCE", "1")])));
        assert!(!color_for(false, env(&[("CLICOLOR_FORCE", "0")])));
        assert!(!color_for(
            false,
            env(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")])
        ));
    }
}
