//! Rebuild when a migration is added: `sqlx::migrate!` embeds each file with `include_str!`
//! (so an edit is tracked), but a new file in the directory is only seen on a rebuild.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
