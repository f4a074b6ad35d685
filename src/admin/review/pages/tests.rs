//! The pages built from what a person typed escape it, in text and in attribute values
//! (`tests/it/review_page/hostile.rs` does the same for stored data over HTTP).

use super::*;
use crate::config::Role;
use crate::store::TenantScope;

const HOSTILE: &str = "<script>alert(1)</script> \"q\" & 'a'";
const ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt; &quot;q&quot; &amp; 'a'";

fn hostile_caller() -> Caller {
    Caller {
        name: HOSTILE.into(),
        role: Role::Operator,
        scope: TenantScope::All,
    }
}

#[track_caller]
fn no_raw_markup(page: &str) {
    assert!(!page.contains("<script>"), "{page}");
    assert!(!page.contains("\"q\""), "{page}");
    assert!(!page.contains(" & "), "{page}");
}

#[test]
fn the_sign_in_and_error_pages_escape_their_message() {
    let login = login(Some(HOSTILE));
    no_raw_markup(&login);
    assert!(login.contains(&format!("role=\"status\">{ESCAPED}</div>")));
    let error = error(Some(&hostile_caller()), HOSTILE);
    no_raw_markup(&error);
    assert!(error.contains(&format!("role=\"status\">{ESCAPED}</div>")));
    assert!(error.contains(&format!("<strong id=\"who\">{ESCAPED}</strong>")));
}

#[test]
fn the_audit_filter_and_its_older_link_escape_what_was_typed() {
    let form = AuditForm {
        actor: HOSTILE.into(),
        action: "a&b".into(),
        intent: "\"7\"".into(),
    };
    let page = audit(&hostile_caller(), &[], Some(41), &form);
    no_raw_markup(&page);
    assert!(page.contains(&format!("id=\"a-actor\" value=\"{ESCAPED}\"")));
    assert!(page.contains("id=\"a-action\" value=\"a&amp;b\""));
    assert!(page.contains("id=\"a-intent\" value=\"&quot;7&quot;\""));
    let link =
        "href=\"/review/audit?actor=%3Cscript%3Ealert%281%29%3C%2Fscript%3E+%22q%22+%26+%27a%27\
                &amp;action=a%26b&amp;intent=%227%22&amp;before_id=41\"";
    assert!(page.contains(link), "{page}");
}

#[test]
fn the_older_link_without_a_filter_has_only_the_position() {
    let page = audit(&hostile_caller(), &[], Some(41), &AuditForm::default());
    assert!(
        page.contains("href=\"/review/audit?before_id=41\""),
        "{page}"
    );
}
