//! `sqlx::migrate!` embeds `migrations/` at compile time, and cargo does not know that: a
//! migration added without touching a Rust file would not be in the binary. This tells
//! cargo to rebuild when the folder changes (sqlx's documented remedy).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
