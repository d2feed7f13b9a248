//! Rebuilds the crate when a migration changes, so the embedded migrations stay current.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
