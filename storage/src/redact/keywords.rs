//! Finding the secrets in a libpq `keyword = value` connection string
//! (`host=db password='s3 cret' dbname=prod`). No crate reads this form; libpq's grammar is
//! small: blanks separate the pairs, blanks may surround `=`, a value is a word or a
//! `'quoted string'`, and a backslash makes the next character literal in either.
//!
//! ```text
//!  host=db password = 's3 \'cret' user=app      password=se cret#x dbname=prod
//!                    └── *** ───┘                        └─ *** ─┘
//! ```
//!
//! Two ways past the grammar, toward hiding more: a secret keyword counts at any word start,
//! even inside another value's quotes (a quote left open would otherwise hide the rest of the
//! string from this reader, not from a reader of the log); and an unquoted value goes on over
//! the words after it that start no `keyword =`, since an unquoted password with a blank in it
//! goes on there (libpq fails on it and quotes the next word back in its message).

use super::{options, Reading};

/// Records in `reading` the values of the secret keywords in `text`.
pub(super) fn read(text: &str, reading: &mut Reading) {
    let mut from = 0;
    while let Some(after_eq) = next_secret_keyword(text, from) {
        let start = after_eq + blank_len(&text[after_eq..]);
        let (written, end) = if text[start..].starts_with('\'') {
            match closing_quote(text, start) {
                Some(close) => (&text[start + 1..close], close + 1),
                // libpq refuses a quote never closed; the value is hidden all the same.
                None => (&text[start + 1..], text.len()),
            }
        } else {
            let end = unquoted_end(text, start);
            (&text[start..end], end)
        };
        // The blanks after `=` go too: the value shown is `***` wherever it started.
        reading.mask(after_eq..end);
        reading.secret(written.to_owned());
        reading.secret(unescape(written));
        from = end;
    }
}

/// The offset just past the `=` of the first secret `keyword =` that starts a word at or after
/// `from` (`from` itself counts as a word start: a keyword may follow a quoted value directly).
fn next_secret_keyword(text: &str, from: usize) -> Option<usize> {
    let mut word_start = true;
    for (i, c) in text[from..].char_indices() {
        if word_start && !c.is_whitespace() {
            if let Some((name, after_eq)) = keyword_at(text, from + i) {
                if options::is_secret(name) {
                    return Some(after_eq);
                }
            }
        }
        word_start = c.is_whitespace();
    }
    None
}

/// The keyword of a `keyword =` beginning at `at`, and the offset just past its `=`.
fn keyword_at(text: &str, at: usize) -> Option<(&str, usize)> {
    let rest = &text[at..];
    let name_len = rest
        .find(|c: char| c == '=' || c.is_whitespace())
        .unwrap_or(rest.len());
    let after_name = &rest[name_len..];
    let after_blanks = &after_name[blank_len(after_name)..];
    after_blanks
        .starts_with('=')
        .then(|| (&rest[..name_len], text.len() - after_blanks.len() + 1))
}

/// Whether a `keyword =` with a plausible keyword (letters, digits, `_`) begins at `at`.
fn starts_keyword(text: &str, at: usize) -> bool {
    keyword_at(text, at).is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The end of an unquoted value starting at `start`: its first word and the words after it
/// that start no `keyword =`.
fn unquoted_end(text: &str, start: usize) -> usize {
    let mut end = word_end(text, start);
    loop {
        let next = end + blank_len(&text[end..]);
        if next == text.len() || starts_keyword(text, next) {
            return end;
        }
        end = word_end(text, next);
    }
}

/// The end of the word starting at `start`: the next blank that no backslash escapes.
fn word_end(text: &str, start: usize) -> usize {
    let mut chars = text[start..].char_indices();
    while let Some((i, c)) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if c.is_whitespace() {
            return start + i;
        }
    }
    text.len()
}

/// The offset of the quote that closes the quoted value opened at `open`: the first quote no
/// backslash escapes.
fn closing_quote(text: &str, open: usize) -> Option<usize> {
    let start = open + 1;
    let mut chars = text[start..].char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' => return Some(start + i),
            _ => {}
        }
    }
    None
}

/// `written` as libpq reads it: each backslash dropped and the character after it kept.
fn unescape(written: &str) -> String {
    let mut value = String::with_capacity(written.len());
    let mut chars = written.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            value.extend(chars.next());
        } else {
            value.push(c);
        }
    }
    value
}

/// The length of the blanks at the start of `s`.
fn blank_len(s: &str) -> usize {
    s.len() - s.trim_start().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str) -> Reading {
        let mut reading = Reading::default();
        read(text, &mut reading);
        reading
    }

    #[test]
    fn a_quoted_value_is_hidden_as_written_and_as_libpq_reads_it() {
        let reading = read_all(r"password='s3 \'cret' user=app");
        assert_eq!(
            reading.shown(r"password='s3 \'cret' user=app"),
            "password=*** user=app"
        );
        assert!(reading.secrets.contains(&r"s3 \'cret".to_owned()));
        assert!(reading.secrets.contains(&"s3 'cret".to_owned()));
    }

    #[test]
    fn an_escaped_blank_does_not_end_an_unquoted_value() {
        // libpq reads the value `a host=x`.
        let text = r"password=a\ host=x dbname=prod";
        assert_eq!(read_all(text).shown(text), "password=*** dbname=prod");
    }

    #[test]
    fn a_keyword_may_follow_a_quoted_value_directly() {
        let text = "password='a b'sslpassword=c2 host=db";
        assert_eq!(
            read_all(text).shown(text),
            "password=***sslpassword=*** host=db"
        );
    }

    #[test]
    fn a_secret_keyword_inside_another_value_is_hidden_in_doubt() {
        let text = "application_name='x password=s3cret";
        assert_eq!(
            read_all(text).shown(text),
            "application_name='x password=***"
        );
    }
}
