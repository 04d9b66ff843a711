//! Rebuilds the crate when a migration changes: `embed_migrations!` reads the migration
//! directories at compile time, and Cargo does not see those files by itself (a build would
//! keep the old schema, and a new column's queries would fail at run time).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
