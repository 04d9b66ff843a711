//! The docs' snippets that exist twice stay one: the getting-started page shows the whole
//! application, and its testing snippet includes the same code from
//! `docs/snippets/getting_started_app.rs` (a doc test cannot include a part of another
//! snippet). Both are compiled and run as doc tests (`doc_pages` in src/lib.rs); this checks
//! that the page shows exactly the file.

#[test]
fn the_getting_started_page_shows_the_application_its_test_includes() {
    let root = env!("CARGO_MANIFEST_DIR");
    let page = std::fs::read_to_string(format!("{root}/docs/getting-started.md"))
        .expect("docs/getting-started.md");
    let app = std::fs::read_to_string(format!("{root}/docs/snippets/getting_started_app.rs"))
        .expect("docs/snippets/getting_started_app.rs");
    assert!(
        page.contains(app.trim_end()),
        "docs/getting-started.md no longer shows docs/snippets/getting_started_app.rs as it is: \
         change both (the page's first snippet is the file, then its main)"
    );
}
