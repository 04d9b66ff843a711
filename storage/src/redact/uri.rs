//! Finding the secrets in a `scheme://…` connection URL, however malformed.
//!
//! ```text
//!  postgres://app:s3#c/r@t@db:5432/prod?sslmode=require&password=p&w#d&port=5
//!             └┬┘ └──┬───┘                                       └─┬─┘
//!             user   password: to the LAST `@`                  value: to `&` + an option
//! ```
//!
//! What is hidden is what any plausible reader could take for a secret, not what one grammar
//! says: users leave `#`, `?`, `/`, `@`, `&` or `%` unencoded in passwords, libpq accepts some
//! of those and quotes pieces of the rest back in its error messages.
//!
//! - The user info is everything between `://` and the last `@` of the text (libpq stops at the
//!   first `@` or `/`, which is never further); the password is what follows its first `:`.
//!   Where the user name cannot be one (it holds `/`, `?` or `#`, so the `@` may sit in a query
//!   value), the whole user info is hidden.
//! - A `?password=` or `&password=` option (and the other secrets in [`super::options`]; the
//!   name percent-decoded, as libpq decodes it) hides its value up to the next `&` that starts
//!   an option libpq knows, or to the end: an `&`, `#` or `@` in a password never shows its tail.
//!
//! Not the `url` crate: it reads URLs by the WHATWG standard, and libpq's URLs are not those.
//! libpq has no fragment (`#` is an ordinary character), takes several `host:port` pairs
//! separated by commas (`url` refuses them as an invalid port), and keeps `+` in a query value
//! where `url`'s query pairs make it a space. `url` also refuses outright the malformed URLs whose
//! passwords most need hiding (`postgres://u:S3c#ret@h/db`: "invalid port number"), and reads
//! `postgres://h/db?password=s3&c#ret` as the password `s3`.

use super::{options, percent_decode, Reading};

/// Records in `reading` the secrets of `text` if it is a `scheme://` URL (found anywhere in the
/// text, so a URL with something before it is still read as one).
pub(super) fn read(text: &str, reading: &mut Reading) {
    let Some(scheme_end) = text.find("://") else {
        return;
    };
    let start = scheme_end + "://".len();
    let Some(at) = text[start..].rfind('@') else {
        hide_query_secrets(text, start, reading);
        return;
    };
    let userinfo = start..start + at;
    match text[userinfo.clone()].find(':') {
        Some(colon) if !text[start..start + colon].contains(['/', '?', '#']) => {
            reading.hide(text, start + colon + 1..userinfo.end);
        }
        Some(_) => reading.hide(text, userinfo.clone()),
        // No password: what looked like a user name may be a query whose secret value has
        // an `@` in it, so it is read as one too.
        None => hide_query_secrets(text, start, reading),
    }
    hide_query_secrets(text, userinfo.end, reading);
}

/// Hides the values of the secret options in `text[from..]`. A secret option inside the value
/// of another (`?oauth_client_secret=a?password=b`) is hidden on its own too, so that its value
/// is scrubbed from messages even where the longer one is not quoted whole.
fn hide_query_secrets(text: &str, from: usize, reading: &mut Reading) {
    let mut at = from;
    while let Some(i) = text[at..].find(['?', '&']) {
        let delimiter = at + i;
        if let Some((name, value_start)) = option_after(text, delimiter) {
            if options::is_secret(&name) {
                let end = next_known_option(text, value_start).unwrap_or(text.len());
                reading.hide(text, value_start..end);
            }
        }
        at = delimiter + 1;
    }
}

/// The offset of the first `&` at or after `from` that starts an option libpq knows.
fn next_known_option(text: &str, from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(i) = text[at..].find('&') {
        let ampersand = at + i;
        if option_after(text, ampersand).is_some_and(|(name, _)| options::is_known(&name)) {
            return Some(ampersand);
        }
        at = ampersand + 1;
    }
    None
}

/// The name (percent-decoded) of the `name=value` option that follows the `?` or `&` at
/// `delimiter`, with the offset where its value starts; `None` if no `=` comes before the next
/// `?` or `&`.
fn option_after(text: &str, delimiter: usize) -> Option<(String, usize)> {
    let name_start = delimiter + 1;
    let name_len = text[name_start..].find(['=', '&', '?'])?;
    let name_end = name_start + name_len;
    text[name_end..].starts_with('=').then(|| {
        (
            percent_decode(&text[name_start..name_end]).into_owned(),
            name_end + 1,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(url: &str) -> String {
        let mut reading = Reading::default();
        read(url, &mut reading);
        reading.shown(url)
    }

    #[test]
    fn a_multi_host_url_hides_its_password() {
        // libpq's list of hosts, which the WHATWG grammar refuses.
        assert_eq!(
            shown("postgresql://app:s3cret@h1:5432,h2:5433/prod?target_session_attrs=any"),
            "postgresql://app:***@h1:5432,h2:5433/prod?target_session_attrs=any"
        );
    }

    #[test]
    fn a_percent_encoded_option_name_is_read_as_libpq_reads_it() {
        // libpq decodes `pass%77ord` to `password` and takes the value as the password.
        assert_eq!(
            shown("postgres://db/prod?pass%77ord=s3cret&ssl%6Dode=disable"),
            "postgres://db/prod?pass%77ord=***&ssl%6Dode=disable"
        );
    }

    #[test]
    fn every_secret_option_is_hidden() {
        let url = "postgres://db?oauth_client_id=app&oauth_client_secret=s3&scram_client_key=k3y";
        assert_eq!(
            shown(url),
            "postgres://db?oauth_client_id=app&oauth_client_secret=***&scram_client_key=***"
        );
    }

    #[test]
    fn a_secret_option_inside_another_secret_value_is_kept_on_its_own() {
        let url = "postgres://db?oauth_client_secret=a?password=s3:cr";
        let mut reading = Reading::default();
        read(url, &mut reading);
        assert_eq!(reading.shown(url), "postgres://db?oauth_client_secret=***");
        assert!(reading.secrets.contains(&"s3:cr".to_owned()));
    }

    #[test]
    fn an_ampersand_that_starts_no_known_option_stays_in_the_password() {
        assert_eq!(
            shown("postgres://db/prod?password=a&b=c&d&port=5"),
            "postgres://db/prod?password=***&port=5"
        );
    }
}
