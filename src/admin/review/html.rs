//! HTML building blocks shared by every console page, all built with `maud`, which
//! escapes every spliced value (text and attributes alike): the page layout (the head with
//! the inline style sheet, the navigation of a signed-in user), notice boxes, table header
//! rows, the link back, and time formatting. No page writes markup by string concatenation.

use chrono::{DateTime, Utc};
use maud::{html, Markup, PreEscaped, Render, DOCTYPE};

use crate::admin::auth::Caller;

/// What a page shows for a value that is absent.
pub(super) const DASH: &str = "—";

/// An optional value, a dash when absent.
pub(super) fn or_dash(text: Option<&str>) -> &str {
    text.unwrap_or(DASH)
}

/// A timestamp as `2024-05-01 12:00:03 UTC`.
pub(super) fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// An optional timestamp, a dash when absent.
pub(super) fn time_opt(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| DASH.to_owned(), time)
}

/// How long ago `at` was, in its two largest units (`3d 4h`, `12m 5s`, `40s`).
pub(super) fn age(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - at).num_seconds().max(0);
    let units = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let mut parts = Vec::new();
    let mut rest = secs;
    for (size, unit) in units {
        if rest >= size || (size == 1 && parts.is_empty()) {
            parts.push(format!("{}{unit}", rest / size));
            rest %= size;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d2330;background:#f6f7f9;font-size:15px}\
header{background:#1d2330;color:#fff;padding:10px 24px;display:flex;gap:20px;align-items:center}\
header a,header button{color:#fff;text-decoration:none;font-weight:600}\
header .who{margin-left:auto;font-size:13px;opacity:.85}\
header form{margin:0}header button{background:none;border:1px solid #fff6;border-radius:4px;padding:3px 10px;cursor:pointer;font-size:13px}\
main{padding:20px 24px;max-width:1200px}\
h1{font-size:22px;margin:0 0 14px}h2{font-size:17px;margin:22px 0 8px}\
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #d8dce3}\
th,td{text-align:left;padding:6px 9px;border-bottom:1px solid #e4e7ec;vertical-align:top}\
th{background:#eef0f4;font-size:13px}\
td.mono,dd.mono,span.mono,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px}\
pre{background:#fff;border:1px solid #d8dce3;padding:10px;overflow:auto;max-height:320px;margin:0}\
dl{display:grid;grid-template-columns:190px 1fr;gap:4px 12px;background:#fff;border:1px solid #d8dce3;padding:12px;margin:0}\
dt{font-weight:600;color:#4a5263}dd{margin:0;word-break:break-all}\
.notice{padding:10px 14px;border-radius:4px;margin:0 0 14px;border:1px solid}\
.ok{background:#e7f6ec;border-color:#9ad1ab}.warn{background:#fff4e0;border-color:#f0c36d}.err{background:#fde8e8;border-color:#f0a3a3}\
form.resolve{background:#fff;border:1px solid #d8dce3;padding:14px;max-width:640px}\
form.resolve label{display:block;margin:6px 0}\
input[type=text],input[type=password],textarea{width:100%;box-sizing:border-box;padding:6px;font:inherit;border:1px solid #b9bfca;border-radius:4px}\
textarea{min-height:70px}\
button.primary{background:#2454d6;color:#fff;border:0;border-radius:4px;padding:8px 16px;font-weight:600;cursor:pointer;margin-top:8px}\
.muted{color:#6b7385}.class-ambiguous{color:#b25b00;font-weight:600}.class-delivered{color:#137333;font-weight:600}\
form.filters{display:flex;flex-wrap:wrap;gap:8px 14px;align-items:end;background:#fff;border:1px solid #d8dce3;padding:10px;margin:0 0 14px}\
form.filters label{font-size:13px;color:#4a5263}form.filters input,form.filters select{display:block;padding:4px;font:inherit;border:1px solid #b9bfca;border-radius:4px}\
form.filters input[type=text]{width:160px}form.filters button{margin:0}\
.cards{display:flex;gap:14px;margin:0 0 10px}.card{background:#fff;border:1px solid #d8dce3;padding:12px 16px;min-width:220px}\
.card .label{font-size:13px;color:#4a5263;font-weight:600}.card .big{font-size:26px;font-weight:700;margin:4px 0}\
.legend{margin-right:10px;white-space:nowrap}#chart{background:#fff;border:1px solid #d8dce3;padding:6px}\
.state-failed,.state-unknown,.skip{color:#b3261e}.state-delivered{color:#137333}tr.skip td{opacity:.8}\
a.button{display:inline-block;background:#2454d6;color:#fff;border-radius:4px;padding:7px 14px;font-weight:600;text-decoration:none}\
ul#why{background:#fff;border:1px solid #d8dce3;padding:10px 10px 10px 28px;margin:0}\
.login{max-width:380px;margin:60px auto;background:#fff;border:1px solid #d8dce3;padding:24px}";

/// A whole page around `content`. `who` adds the navigation and the logout button of a
/// signed-in user.
pub(super) fn layout(title: &str, who: Option<&Caller>, content: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width,initial-scale=1";
                title { (title) " · outboxd review" }
                // The style sheet is this file's constant, not data: nothing to escape.
                style { (PreEscaped(STYLE)) }
            }
            body {
                (navigation(who))
                main { (content) }
            }
        }
    }
    .into_string()
}

/// The header bar: the console's name, and for a signed-in user its pages and who it is.
fn navigation(who: Option<&Caller>) -> Markup {
    html! {
        header {
            a href="/review" { "outboxd review" }
            @if let Some(caller) = who {
                a href="/review" { "Dashboard" }
                a href="/review/intents" { "Intents" }
                a href="/review/queue" { "Queue" }
                a href="/review/audit" { "Audit log" }
                span.who { "signed in as " strong id="who" { (caller.name) } " (" (caller.role) ")" }
                form method="post" action="/review/logout" {
                    button type="submit" id="logout" { "Log out" }
                }
            }
        }
    }
}

/// A notice box; `class` is `ok`, `warn` or `err`.
pub(super) fn notice(class: &str, message: impl Render) -> Markup {
    html! {
        div class={ "notice " (class) } id="notice" role="status" { (message) }
    }
}

/// A table's header row.
pub(super) fn head_row(columns: &[&str]) -> Markup {
    html! {
        thead { tr { @for column in columns { th { (column) } } } }
    }
}

/// The link at the foot of a page back to `href`.
pub(super) fn back_link(href: &str, label: &str) -> Markup {
    html! {
        p { a href=(href) { "← " (label) } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;
    use crate::store::TenantScope;

    #[test]
    fn ages_show_two_units() {
        let now = Utc::now();
        let ago = |s| now - chrono::Duration::seconds(s);
        assert_eq!(age(ago(0), now), "0s");
        assert_eq!(age(ago(42), now), "42s");
        assert_eq!(age(ago(725), now), "12m 5s");
        assert_eq!(age(ago(3 * 86_400 + 4 * 3_600 + 7), now), "3d 4h");
        assert_eq!(age(ago(3_600), now), "1h");
    }

    #[test]
    fn the_layout_escapes_the_title_and_the_callers_name() {
        let caller = Caller {
            name: "<script>alert(1)</script>\"&".into(),
            role: Role::Operator,
            scope: TenantScope::All,
        };
        let page = layout("a<b>\"c\"&d", Some(&caller), html! { p { "body" } });
        assert!(page.contains("<title>a&lt;b&gt;&quot;c&quot;&amp;d · outboxd review</title>"));
        assert!(page.contains(
            "<strong id=\"who\">&lt;script&gt;alert(1)&lt;/script&gt;&quot;&amp;</strong>"
        ));
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("<main><p>body</p></main>"));
    }

    #[test]
    fn a_notice_escapes_text_and_keeps_markup_built_with_maud() {
        let text = notice("err", "<b>&</b>").into_string();
        assert_eq!(
            text,
            "<div class=\"notice err\" id=\"notice\" role=\"status\">&lt;b&gt;&amp;&lt;/b&gt;</div>"
        );
        let built = notice("ok", html! { strong { "done" } }).into_string();
        assert!(built.ends_with("role=\"status\"><strong>done</strong></div>"));
    }
}
