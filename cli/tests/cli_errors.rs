//! Errors that fit their case, as an operator meets them running the binary: a file that is
//! not a database or an in-memory database is not told to check that a server "is running
//! and reachable" (an unreachable server still is); a URL of a scheme no backend serves is
//! refused naming the forms that work; a re-sharding to 0 shards is refused before anything
//! is announced; a PostgreSQL schema without Shardbox tables (a misspelled `--schema`) says
//! so and names `shardbox migrate`, instead of listing every migration.

use shardbox::prelude::*;
use shardbox_storage::test_schema::{pg_url, TestSchema};
mod support;

use support::binary::{code, run, stderr, stdout};

/// The advice of a server that cannot be reached.
const SERVER_ADVICE: &str = "running and reachable";

#[test]
fn a_file_that_is_not_a_database_is_not_a_server_to_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "shopping list: eggs, flour, milk\n".repeat(200)).expect("write");
    let notes = notes.to_str().expect("utf-8 path");
    for args in [&["status"][..], &["migrate"]] {
        let out = run(notes, None, args);
        let err = stderr(&out);
        assert_eq!(code(&out), 3, "{args:?}: {err}");
        assert!(
            err.contains("not a SQLite database") && err.contains(notes),
            "{args:?} names the file and what it is not: {err}"
        );
        assert!(!err.contains(SERVER_ADVICE), "{args:?}: {err}");
    }

    // A directory that does not exist: the path is at fault, not a server.
    let nowhere = dir.path().join("no-such-dir").join("shardbox.db");
    let out = run(nowhere.to_str().expect("utf-8 path"), None, &["migrate"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 3, "{err}");
    assert!(err.contains("Check the path"), "{err}");
    assert!(!err.contains(SERVER_ADVICE), "{err}");

    // An in-memory database has nothing to operate: a usage error, no server advice.
    for args in [&["status"][..], &["migrate"]] {
        let out = run(":memory:", None, args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{args:?}: {err}");
        assert!(err.contains("in-memory"), "{args:?}: {err}");
        assert!(!err.contains(SERVER_ADVICE), "{args:?}: {err}");
    }

    // A server that cannot be reached keeps its advice.
    let out = run(
        "postgres://nobody@127.0.0.1:1/none?connect_timeout=2",
        None,
        &["status"],
    );
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains(SERVER_ADVICE), "{}", stderr(&out));
}

#[test]
fn a_url_of_another_scheme_is_refused_naming_the_supported_forms() {
    let dir = tempfile::tempdir().expect("tempdir");
    for url in ["mysql://app:s3cret@db.example/shop", "xyz://anything"] {
        // Run where a file of that "path" could be created: nothing may be.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shardbox"))
            .current_dir(dir.path())
            .env_remove("SHARDBOX_DB")
            .args(["--db", url, "migrate"])
            .output()
            .expect("run");
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{url}: a usage error: {err}");
        let scheme = url.split("://").next().expect("scheme");
        assert!(
            err.contains(&format!("`{scheme}://`"))
                && err.contains("postgres://")
                && err.contains("SQLite file"),
            "{url}: {err}"
        );
        assert!(!err.contains("no such file"), "{url}: not a path: {err}");
        assert!(
            !err.contains("s3cret"),
            "{url}: the password is redacted: {err}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("list").count(),
            0,
            "{url}: no file created"
        );
    }
}

#[tokio::test]
async fn reshard_to_zero_shards_is_refused_before_anything_is_announced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("reshard.db");
    let db = path.to_str().expect("utf-8 path");
    // A node has recorded its shard count: the command would go as far as announcing.
    let storage = SqliteStorage::open(&path).await.expect("open");
    drop(
        Shardbox::builder()
            .storage(storage)
            .shards(4)
            .build()
            .await
            .expect("build"),
    );
    for json in [false, true] {
        let mut args = vec!["reshard", "--shards", "0"];
        if json {
            args.insert(0, "--json");
        }
        let out = run(db, None, &args);
        let (out_text, err) = (stdout(&out), stderr(&out));
        assert_eq!(code(&out), 2, "a usage error: {err}");
        assert!(
            err.contains("--shards") && err.contains("1..=65536"),
            "{err}"
        );
        assert!(
            !err.contains("re-sharding") && !out_text.contains("re-shard"),
            "nothing announced: {out_text}{err}"
        );
    }
}

#[test]
fn a_schema_without_shardbox_tables_says_so_and_names_migrate() {
    let Some(url) = pg_url("a_schema_without_shardbox_tables_says_so_and_names_migrate") else {
        return;
    };
    // A schema name nobody migrated, as a typo of the real one would be.
    let typo = TestSchema::new(&url, "cli_typo");
    for args in [&["status"][..], &["dead-letters", "list"]] {
        let out = run(&url, Some(&typo.name), args);
        let err = stderr(&out);
        assert_eq!(code(&out), 3, "{args:?}: {err}");
        assert!(
            err.contains("no Shardbox tables")
                && err.contains("shardbox migrate")
                && err.contains(&format!("schema {}", typo.name)),
            "{args:?}: says what is wrong, where, and what to run: {err}"
        );
        assert!(
            !err.contains("_shardbox_schema") && !err.contains("_settings"),
            "{args:?}: no list of migration names: {err}"
        );
    }
}
