//! Rebuilds the crate when a schema migration is added or changed:
//! `sqlx::migrate!` embeds `migrations/` at compile time, and cargo does
//! not otherwise know the directory is an input (a new migration file
//! would be left out of an incremental build).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
