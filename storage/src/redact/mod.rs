//! Keeping database passwords out of everything Shardbox prints: the one place that turns a
//! URL or connection string into the text shown in errors, `Debug`, `describe()` and logs,
//! and that scrubs the messages of libpq and the pool before they are passed on.
//!
//! ```text
//!  url or conninfo ──► read ──┬─ uri::read       scheme://user:pw@host/db?password=…
//!                             └─ keywords::read  host=db password=…
//!                  ──► Reading: masks + secrets
//!                        ├─► shown:   redact(url), DbName   "postgres://app:***@db/prod"
//!                        └─► secrets: DbName, as written, percent-decoded, and in pieces
//!  driver error ──► DbName::scrub(message) / DbName::cause(error) ──► "…\"***\"…"
//! ```
//!
//! Both readers read every text, and what either calls a secret is hidden: a text is not
//! sorted into "URL" or "keywords" first, so a keyword value holding `://` cannot make the
//! keyword reader miss its password. Each reader hides what any plausible reading (libpq's,
//! the standard's, that of a user who left `#` or `@` unencoded in a password) takes for a
//! secret: in doubt, more goes. This module decides what to show; it never decides how to
//! connect, and it is no validator: a text it cannot make sense of is shown as it is.

mod db_name;
mod keywords;
mod options;
mod uri;

pub(crate) use db_name::DbName;
pub use db_name::RedactedError;
use std::borrow::Cow;
use std::ops::Range;

/// A database URL or connection string with its password replaced by `***`, fit for logs and
/// error messages.
///
/// Handles URLs (`postgres://user:secret@host/db`, also `?password=secret` in the query),
/// however malformed, and libpq keyword/value strings (`host=h password=secret`). Anything
/// else (a file path) is returned unchanged.
///
/// ```
/// use shardbox_storage::redact;
/// assert_eq!(redact("postgres://app:s3cret@db:5432/prod"), "postgres://app:***@db:5432/prod");
/// assert_eq!(redact("postgres://app:s3c#r/t@db/prod"), "postgres://app:***@db/prod");
/// assert_eq!(redact("host=db password=s3cret dbname=prod"), "host=db password=*** dbname=prod");
/// ```
pub fn redact(url: &str) -> String {
    let reading = read(url);
    reading.shown(url)
}

/// What the readers found in a text: the byte ranges to show as `***`, and the secrets there.
#[derive(Default)]
struct Reading {
    masks: Vec<Range<usize>>,
    // Only the PostgreSQL backend scrubs messages with them.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    secrets: Vec<String>,
}

impl Reading {
    /// Shows `text[range]` as `***` and keeps it as a secret.
    fn hide(&mut self, text: &str, range: Range<usize>) {
        self.secret(text[range.clone()].to_owned());
        self.mask(range);
    }

    /// Shows `range` as `***` (an empty range too: an empty password is still one).
    fn mask(&mut self, range: Range<usize>) {
        self.masks.push(range);
    }

    /// Keeps `secret` to scrub from messages.
    fn secret(&mut self, secret: String) {
        self.secrets.push(secret);
    }

    /// `text` with each mask, or each run of overlapping masks, replaced by one `***`.
    fn shown(&self, text: &str) -> String {
        let mut masks = self.masks.clone();
        masks.sort_by_key(|m| (m.start, m.end));
        let mut masks = masks.into_iter().peekable();
        let mut out = String::with_capacity(text.len());
        let mut shown_to = 0;
        while let Some(mut mask) = masks.next() {
            while let Some(next) = masks.next_if(|next| next.start <= mask.end) {
                mask.end = mask.end.max(next.end);
            }
            out.push_str(&text[shown_to..mask.start]);
            out.push_str("***");
            shown_to = mask.end;
        }
        out.push_str(&text[shown_to..]);
        out
    }
}

/// Reads `text` as a URL and as a keyword/value string.
fn read(text: &str) -> Reading {
    let mut reading = Reading::default();
    uri::read(text, &mut reading);
    keywords::read(text, &mut reading);
    reading
}

/// `s` with its valid `%XX` escapes decoded (invalid ones left as they are), as libpq would
/// send it; bytes that are not UTF-8 become U+FFFD.
fn percent_decode(s: &str) -> Cow<'_, str> {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// URLs and connection strings with the password each hides, and the text they must show.
    const HOSTILE: &[(&str, &str, &str)] = &[
        (
            "postgres://app:s3cret@db.example:5432/prod?sslmode=require",
            "s3cret",
            "postgres://app:***@db.example:5432/prod?sslmode=require",
        ),
        (
            "postgresql://app:p%40ss@db/prod",
            "p%40ss",
            "postgresql://app:***@db/prod",
        ),
        ("postgres://u:a@b@h/db", "a@b", "postgres://u:***@h/db"),
        (
            "postgres://postgres:S3c#retPw6@127.0.0.1:5433/test",
            "S3c#retPw6",
            "postgres://postgres:***@127.0.0.1:5433/test",
        ),
        (
            "postgres://postgres:S3c?retPw6@127.0.0.1/test",
            "S3c?retPw6",
            "postgres://postgres:***@127.0.0.1/test",
        ),
        (
            "postgres://postgres:S3c/retPw6@127.0.0.1/test",
            "S3c/retPw6",
            "postgres://postgres:***@127.0.0.1/test",
        ),
        (
            "postgres://postgres:S3c:ret@Pw6@127.0.0.1/test",
            "S3c:ret@Pw6",
            "postgres://postgres:***@127.0.0.1/test",
        ),
        (
            "postgres://postgres:S3c%zzretPw6@127.0.0.1/test",
            "S3c%zzretPw6",
            "postgres://postgres:***@127.0.0.1/test",
        ),
        (
            "postgres://postgres:%@127.0.0.1/test",
            "%",
            "postgres://postgres:***@127.0.0.1/test",
        ),
        (
            "postgres://postgres:#?/@:%zz@127.0.0.1/test?application_name=x",
            "#?/@:%zz",
            "postgres://postgres:***@127.0.0.1/test?application_name=x",
        ),
        (
            "postgres://db/prod?user=app&password=s3cret&sslmode=disable",
            "s3cret",
            "postgres://db/prod?user=app&password=***&sslmode=disable",
        ),
        (
            "postgres://db/prod?password=s3&c#ret@x&sslmode=disable",
            "s3&c#ret@x",
            "postgres://db/prod?password=***&sslmode=disable",
        ),
        (
            "postgres://db/prod?sslpassword=k3yPw&port=5",
            "k3yPw",
            "postgres://db/prod?sslpassword=***&port=5",
        ),
        (
            "host=db password=s3cret dbname=prod",
            "s3cret",
            "host=db password=*** dbname=prod",
        ),
        (
            "host=db password = 's3 \\'cret' user=app",
            "s3 \\'cret",
            "host=db password =*** user=app",
        ),
        (
            "host=db password=se cret#x dbname=prod",
            "se cret#x",
            "host=db password=*** dbname=prod",
        ),
        (
            "host=db password='unterminated s3cret",
            "unterminated s3cret",
            "host=db password=***",
        ),
        ("PASSWORD=x1", "x1", "PASSWORD=***"),
    ];

    #[test]
    fn hostile_urls_never_show_their_password() {
        for (url, password, shown) in HOSTILE {
            let redacted = redact(url);
            assert!(
                redacted.ends_with(shown) || redacted == *shown,
                "{url}: shown as {redacted}, expected {shown}"
            );
            assert!(!redacted.contains(password), "{url}: {redacted}");
            let name = DbName::url(url);
            assert_eq!(name.as_str(), redacted);
            assert_eq!(format!("{name:?}"), format!("{redacted:?}"));
            // Whatever a driver says about the URL or the password is scrubbed.
            for message in [
                format!("invalid percent-encoded token: \"{password}\"\n"),
                format!("could not parse {url}"),
                format!("password was {}", percent_decode(password)),
            ] {
                let scrubbed = name.scrub(&message);
                assert!(!scrubbed.contains(password), "{url}: {scrubbed}");
                assert!(!scrubbed.ends_with('\n'));
            }
        }
    }

    #[test]
    fn in_doubt_the_userinfo_goes() {
        // The `@` is in a query value: nothing tells it from a password holding `/` and `?`,
        // so everything between the first `:` and that `@` is redacted.
        let url = "postgres://h:5432/db?application_name=a@b";
        assert_eq!(redact(url), "postgres://h:***@b");
        // What cannot be a user name (it holds a `/`) goes with the password.
        let url = "postgres://h/db?x=y:z@b";
        assert_eq!(redact(url), "postgres://***@b");
    }

    #[test]
    fn pieces_of_a_password_libpq_quotes_are_scrubbed() {
        let name = DbName::url("postgres://postgres:S3c#ret/Pw6@127.0.0.1:5432/test");
        assert_eq!(
            name.scrub("invalid integer value \"S3c#ret\" for connection option \"port\"\n"),
            "invalid integer value \"***#***\" for connection option \"port\""
        );
        let name = DbName::url("postgres://postgres:S3c%41zz@127.0.0.1/test");
        assert_eq!(name.scrub("got S3cAzz"), "got ***");
    }

    #[test]
    fn leaves_urls_without_password_alone() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgres://postgres:@127.0.0.1:5432/test"
                .replace(":@", "@")
                .as_str(),
            "postgres://127.0.0.1/test",
            "postgres:///test?host=/var/run/postgresql",
            "postgres://postgres@127.0.0.1/test?application_name=a%20b",
            "/var/lib/app/shardbox.db",
            "host=db user=app dbname=prod",
            "mypassword=x",
            "",
        ] {
            assert_eq!(redact(url), url);
            let name = DbName::url(url);
            assert_eq!(name.scrub("user postgres at db\n"), "user postgres at db");
        }
        // An empty password is redacted as a password, and scrubs nothing.
        let name = DbName::url("postgres://app:@db/prod");
        assert_eq!(name.as_str(), "postgres://app:***@db/prod");
        assert_eq!(name.scrub("app at db"), "app at db");
    }

    #[test]
    fn a_keyword_value_holding_a_scheme_separator_is_still_hidden() {
        // Any text holding `://` used to be read as a URL only.
        assert_eq!(redact("host=db password=se://cret"), "host=db password=***");
        assert_eq!(
            redact("application_name=x://y password=s3cret"),
            "application_name=x://y password=***"
        );
    }

    #[test]
    fn a_password_option_after_an_at_in_a_query_value_is_scrubbed_on_its_own() {
        // libpq reads `?password=x` as the user name and `s3:cr` as the password.
        let name = DbName::url("postgres://?password=x@h/db?password=s3:cr");
        assert_eq!(name.as_str(), "postgres://?password=***");
        assert_eq!(name.scrub("bad value \"s3:cr\""), "bad value \"***\"");
    }

    #[test]
    fn several_secret_keywords_all_go() {
        assert_eq!(
            redact("password=x1 sslpassword=y2"),
            "password=*** sslpassword=***"
        );
    }

    #[test]
    fn a_cause_that_shows_a_secret_is_replaced_by_its_scrubbed_text() {
        let name = DbName::url("postgres://app:hunter2@db/prod");
        let leaky = std::io::Error::other("bad token \"hunter2\"");
        let cause = name.cause(leaky);
        assert_eq!(cause.to_string(), "bad token \"***\"");
        assert!(!format!("{cause:?}").contains("hunter2"));
        let clean = std::io::Error::other("connection refused");
        let cause = name.cause(clean);
        assert!(cause.downcast_ref::<std::io::Error>().is_some());
    }
}
