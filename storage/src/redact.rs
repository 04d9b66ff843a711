//! Keeping database passwords out of everything Shardbox prints: the one place that turns a
//! URL or connection string into the text shown in errors, `Debug`, `describe()` and logs,
//! and that scrubs the messages of libpq and the pool before they are passed on.
//!
//! ```text
//!  url ──► DbName::url ──┬─► shown:   redact(url)   "postgres://app:***@db/prod"
//!                        └─► secrets: the password, percent-decoded too, and its pieces
//!  driver error ──► DbName::scrub(message) / DbName::cause(error) ──► "…\"***\"…"
//! ```
//!
//! URLs are parsed defensively, not by the RFC: users write passwords with `#`, `?`, `/`, `@`
//! or `%` left unencoded, and libpq accepts several of those. The user info is whatever lies
//! between the scheme's `//` and the LAST `@` of the URL; the password is what follows its
//! first `:`. Where even the user name looks wrong (it holds `/`, `?` or `#`), the whole user
//! info is redacted. libpq quotes pieces of a malformed URL back in its messages (`invalid
//! percent-encoded token: "S3c%zz"`, `invalid integer value "S3c#ret" for connection option
//! "port"`), so scrubbing replaces the password, its percent-decoded form and every piece of
//! it between reserved characters.

use shardbox_core::Cause;
use std::sync::Arc;

/// Query or keyword options whose values are secrets.
const SECRET_KEYS: &[&str] = &["password", "sslpassword"];

/// Characters that split a password into the pieces libpq may quote on their own.
// Only the PostgreSQL backend names databases by URL.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
const PIECE_SEPARATORS: &[char] = &['/', '?', '#', '@', ':', '&', '=', '%', '\'', '"'];

/// Pieces shorter than this are not scrubbed on their own: a piece of one or two characters
/// would turn every message into asterisks and gives away little of the password.
// Only the PostgreSQL backend names databases by URL.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
const MIN_PIECE: usize = 3;

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
    parse(url).shown
}

/// A database's printable name, with the secrets to scrub from whatever is said about it.
#[derive(Clone)]
pub(crate) struct DbName {
    shown: Arc<str>,
    /// Longest first, so that a piece never splits a longer secret before it is replaced.
    secrets: Arc<[String]>,
}

/// Shows the name only, never the secrets.
impl std::fmt::Debug for DbName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.shown, f)
    }
}

impl std::fmt::Display for DbName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl DbName {
    /// The name of the database at `url` (or connection string).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn url(url: &str) -> Self {
        let Parsed { shown, secrets } = parse(url);
        let mut all: Vec<String> = Vec::new();
        for secret in secrets {
            let decoded = percent_decode(&secret);
            for form in [secret, decoded] {
                for piece in
                    form.split(|c: char| PIECE_SEPARATORS.contains(&c) || c.is_whitespace())
                {
                    if piece.chars().count() >= MIN_PIECE {
                        all.push(piece.to_owned());
                    }
                }
                if !form.is_empty() {
                    all.push(form);
                }
            }
        }
        all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        all.dedup();
        DbName {
            shown: shown.into(),
            secrets: all.into(),
        }
    }

    /// The name of a database that has no secrets (a file path).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // only SQLite names files
    pub(crate) fn path(path: impl Into<String>) -> Self {
        DbName {
            shown: path.into().into(),
            secrets: Arc::from(Vec::new()),
        }
    }

    /// The name as shown.
    pub(crate) fn as_str(&self) -> &str {
        &self.shown
    }

    /// `message` with every secret replaced by `***` and libpq's trailing newline trimmed.
    pub(crate) fn scrub(&self, message: &str) -> String {
        let mut out = message.trim_end().to_owned();
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "***");
            }
        }
        out
    }

    /// Whether `text` shows a secret.
    fn shows_secret(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// `error` kept as a cause if nothing it prints (Display or Debug, down its `source()`
    /// chain) shows a secret; otherwise a scrubbed copy of its text, which has no source.
    pub(crate) fn cause(&self, error: impl std::error::Error + Send + Sync + 'static) -> Cause {
        let mut leaks = false;
        let mut next: Option<&dyn std::error::Error> = Some(&error);
        while let Some(e) = next {
            leaks |= self.shows_secret(&e.to_string()) || self.shows_secret(&format!("{e:?}"));
            next = e.source();
        }
        if leaks {
            Cause::new(RedactedError {
                message: self.scrub(&error.to_string()),
            })
        } else {
            Cause::new(error)
        }
    }
}

/// The text of a driver error that showed a password, with the password replaced by `***`.
#[derive(Debug)]
pub struct RedactedError {
    message: String,
}

impl std::fmt::Display for RedactedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RedactedError {}

/// What [`parse`] found: the text to show and the raw secrets.
struct Parsed {
    shown: String,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    secrets: Vec<String>,
}

fn parse(url: &str) -> Parsed {
    match url.find("://") {
        Some(scheme_end) => parse_url(url, scheme_end + 3),
        None if looks_like_keyword_value(url) => parse_keyword_value(url),
        None => Parsed {
            shown: url.to_owned(),
            secrets: Vec::new(),
        },
    }
}

/// Whether `s` is a libpq `keyword=value` string rather than a file path.
fn looks_like_keyword_value(s: &str) -> bool {
    find_secret_key(s).is_some() || s.contains('=')
}

fn parse_url(url: &str, authority_start: usize) -> Parsed {
    let (prefix, rest) = url.split_at(authority_start);
    let mut secrets = Vec::new();
    let mut shown = String::with_capacity(url.len());
    shown.push_str(prefix);
    let mut plain_userinfo = false;
    let after_userinfo = match rest.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            match userinfo.split_once(':') {
                Some((user, password)) if !user.contains(['/', '?', '#']) => {
                    shown.push_str(user);
                    shown.push_str(":***");
                    secrets.push(password.to_owned());
                }
                Some(_) => {
                    // Not a user name: the `@` may belong to a query value, or the URL is
                    // mangled beyond telling. Redact all of it.
                    shown.push_str("***");
                    secrets.push(userinfo.to_owned());
                }
                None => {
                    shown.push_str(userinfo);
                    plain_userinfo = true;
                }
            }
            &rest[at..]
        }
        None => rest,
    };
    let (query_shown, query_secrets) = redact_query_secrets(after_userinfo);
    shown.push_str(&query_shown);
    secrets.extend(query_secrets);
    // A secret option may also sit in what was taken for a user name (an `@` in a query
    // value), its value running on past that `@`.
    if plain_userinfo {
        let (again, more) = redact_query_secrets(&shown[prefix.len()..]);
        if !more.is_empty() {
            shown = format!("{prefix}{again}");
            secrets.extend(more);
        }
    }
    Parsed { shown, secrets }
}

/// Replaces the values of `password=` / `sslpassword=` options (after `?` or `&`) by `***`.
/// A value ends at the next `&` that starts another known option; without one it runs to the
/// end, so an `&` inside a password never exposes its tail.
fn redact_query_secrets(s: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(s.len());
    let mut secrets = Vec::new();
    let mut rest = s;
    while let Some(value_start) = find_query_secret(rest) {
        out.push_str(&rest[..value_start]);
        out.push_str("***");
        let value = &rest[value_start..];
        let end = next_option(value).unwrap_or(value.len());
        secrets.push(value[..end].to_owned());
        rest = &value[end..];
    }
    out.push_str(rest);
    (out, secrets)
}

/// Where the value of the first secret option after `?` or `&` begins.
fn find_query_secret(s: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut best: Option<(usize, usize)> = None;
    for key in SECRET_KEYS {
        let mut from = 0;
        while let Some(i) = lower[from..].find(key) {
            let at = from + i;
            let after = at + key.len();
            let delimited = at > 0 && matches!(lower.as_bytes()[at - 1], b'?' | b'&');
            if delimited && lower[after..].starts_with('=') {
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, after + 1));
                }
                break;
            }
            from = after;
        }
    }
    best.map(|(_, value_start)| value_start)
}

/// The offset of the next `&option=` in `value`, where `option` is one libpq knows.
fn next_option(value: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = value[from..].find('&') {
        let at = from + i;
        let key_end = value[at + 1..].find('=').map(|e| at + 1 + e);
        if let Some(key_end) = key_end {
            if is_libpq_option(&value[at + 1..key_end]) {
                return Some(at);
            }
        }
        from = at + 1;
    }
    None
}

/// libpq's connection options (as of libpq 18), for telling where a password value ends.
fn is_libpq_option(key: &str) -> bool {
    const OPTIONS: &[&str] = &[
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "require_auth",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "sslnegotiation",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslkeylogfile",
        "sslpassword",
        "sslcertmode",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "min_protocol_version",
        "max_protocol_version",
        "krbsrvname",
        "gsslib",
        "gssdelegation",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
        "scram_client_key",
        "scram_server_key",
        "oauth_issuer",
        "oauth_client_id",
        "oauth_client_secret",
        "oauth_scope",
    ];
    OPTIONS.iter().any(|o| o.eq_ignore_ascii_case(key))
}

/// A libpq `keyword = value` string: values of secret keywords are replaced, quoted or not. An
/// unquoted value is followed by whatever words do not start another `keyword =`, since an
/// unquoted password with a space in it goes on there.
fn parse_keyword_value(conninfo: &str) -> Parsed {
    let mut shown = String::with_capacity(conninfo.len());
    let mut secrets = Vec::new();
    let mut rest = conninfo;
    while let Some(pos) = find_secret_key(rest) {
        shown.push_str(&rest[..pos]);
        let after_key = &rest[pos..];
        let eq = after_key.find('=').map_or(after_key.len(), |e| e + 1);
        shown.push_str(&after_key[..eq]);
        shown.push_str("***");
        let value = after_key[eq..].trim_start();
        let skipped = after_key.len() - eq - value.len();
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            // A quoted value ends at the first unescaped quote (or, unterminated, at the end).
            let mut escaped = false;
            let mut end = quoted.len();
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = i + 1;
                        break;
                    }
                    _ => escaped = false,
                }
            }
            1 + end
        } else {
            unquoted_value_len(value)
        };
        secrets.push(value[..value_len].to_owned());
        rest = &after_key[eq + skipped + value_len..];
    }
    shown.push_str(rest);
    Parsed { shown, secrets }
}

/// The length of an unquoted value and of the words after it that start no `keyword =`.
fn unquoted_value_len(value: &str) -> usize {
    let mut end = value.find(char::is_whitespace).unwrap_or(value.len());
    loop {
        let next = value[end..].trim_start();
        if next.is_empty() {
            return end;
        }
        let word_len = next.find(char::is_whitespace).unwrap_or(next.len());
        let key_len = next
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(next.len());
        if key_len > 0 && next[key_len..].trim_start().starts_with('=') {
            return end;
        }
        end = value.len() - next.len() + word_len;
    }
}

/// The byte offset of a secret keyword (followed by `=`) at a word start.
fn find_secret_key(s: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut best: Option<usize> = None;
    for key in SECRET_KEYS {
        let mut from = 0;
        while let Some(i) = lower[from..].find(key) {
            let at = from + i;
            let word_start = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
            let after = lower[at + key.len()..].trim_start();
            if word_start && after.starts_with('=') {
                best = Some(best.map_or(at, |b: usize| b.min(at)));
                break;
            }
            from = at + key.len();
        }
    }
    best
}

/// `s` with its valid `%XX` escapes decoded (invalid ones left as they are), as libpq would
/// send it; bytes that are not UTF-8 become U+FFFD.
// Only the PostgreSQL backend names databases by URL.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
