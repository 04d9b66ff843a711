//! The request guard: what keeps a web page in the operator's browser from using the admin
//! surface.
//!
//! ```text
//!  every request   Host one of the allowed hosts?            no → 403 (names allow_hosts / --allowed-host)
//!  every POST      Origin absent, or this server's own?      no → 403
//!                  Content-Type application/json (or +json)? no → 415
//! ```
//!
//! Why each check:
//!
//! - **Host.** A page on `evil.example` can make its name resolve to 127.0.0.1 (DNS
//!   rebinding); the browser then treats the loopback server as `evil.example` itself, lets
//!   the page read every answer (dead-letter payloads among them) and send actions. The
//!   request still says `Host: evil.example`: a server that answers only the names it is
//!   reached by (loopback names and those configured) is out of the page's reach.
//! - **Content type.** A cross-site form or a "simple" `fetch` can POST without asking the
//!   server first, but only as `text/plain`, `application/x-www-form-urlencoded` or
//!   `multipart/form-data`. A JSON body makes the browser ask first (a CORS preflight),
//!   which this surface never grants, so the POST is never sent. A body-less POST (a cancel)
//!   needs the type too.
//! - **Origin.** A browser names the page that sent a POST; one from another origin is
//!   refused even where the other checks would let it through (an old browser, a
//!   misconfigured proxy).
//!
//! Tools (curl, scripts, the tests) send no `Origin` and are not refused by it. The
//! decisions are plain functions of the header values, tested below; [`check`] applies them.

use crate::http::state::AdminState;
use axum::extract::{Request, State};
use axum::http::uri::{Authority, Uri};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// The names a surface answers by default: the loopback names.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The entry of the allowed hosts that allows every host (turns the host check off).
pub const ANY_HOST: &str = "*";

/// Why a request is refused: its status and what to tell the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 403 or 415.
    pub status: StatusCode,
    /// The error text: what was refused and what to configure.
    pub error: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.error }))).into_response()
    }
}

/// The host name of an allowed-hosts entry or a `Host` value, compared as it is: without a
/// port, IPv6 brackets or a trailing dot, lower-cased. `None` if it is not a host.
pub fn host_name(value: &str) -> Option<String> {
    let value = value.trim();
    // A bare IPv6 address (an entry such as `::1`) is not an authority.
    let host = match value.parse::<std::net::Ipv6Addr>() {
        Ok(_) => value.to_owned(),
        Err(_) => value.parse::<Authority>().ok()?.host().to_owned(),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host);
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Checks the request's `Host` (or, without one, its URI's authority) against `allowed`
/// (entries as [`host_name`] reads them; [`ANY_HOST`] allows all).
pub fn check_host(host: Option<&str>, allowed: &[String]) -> Result<(), Refusal> {
    if allowed.iter().any(|a| a == ANY_HOST) {
        return Ok(());
    }
    let refuse = |what: String| Refusal {
        status: StatusCode::FORBIDDEN,
        error: format!(
            "{what}: this admin surface answers only the hosts {} (a page of another site could \
             otherwise reach it through a name that resolves here). Reaching it by another name \
             or address? Add that name: `shardbox serve --allowed-host NAME` or \
             AdminState::allow_hosts([\"NAME\"])",
            allowed.join(", ")
        ),
    };
    let Some(value) = host else {
        return Err(refuse("the request has no Host header".into()));
    };
    let Some(name) = host_name(value) else {
        return Err(refuse(format!("Host {value:?} is not a host name")));
    };
    if allowed
        .iter()
        .any(|a| host_name(a).is_some_and(|a| a == name))
    {
        Ok(())
    } else {
        Err(refuse(format!("Host {value:?} is not allowed")))
    }
}

/// `scheme://host[:port]` of `value` as (host name, port), the port the scheme's default when
/// none is given.
fn origin_of(value: &str) -> Option<(String, Option<u16>)> {
    let uri = value.trim().parse::<Uri>().ok()?;
    let authority = uri.authority()?;
    let port = authority.port_u16().or_else(|| match uri.scheme_str() {
        Some("http") => Some(80),
        Some("https") => Some(443),
        _ => None,
    });
    Some((host_name(authority.as_str())?, port))
}

/// Checks a POST's `Origin` against its `Host`: absent (not sent by a browser) or the same
/// host and port passes; another, or `null` (a sandboxed page, a `file:` page), is refused.
pub fn check_origin(origin: Option<&str>, host: Option<&str>) -> Result<(), Refusal> {
    let Some(origin) = origin else {
        return Ok(());
    };
    let same = origin_of(origin).is_some_and(|(origin_host, origin_port)| {
        host.and_then(|h| h.trim().parse::<Authority>().ok())
            .is_some_and(|h| {
                host_name(h.as_str()).is_some_and(|name| name == origin_host)
                    && h.port_u16().or(origin_port) == origin_port
            })
    });
    if same {
        Ok(())
    } else {
        Err(Refusal {
            status: StatusCode::FORBIDDEN,
            error: format!(
                "a cross-origin POST is refused: it comes from a page of {origin:?}, not of this \
                 server ({}). Send actions from the dashboard this server serves, or from a tool \
                 (which sends no Origin); behind a proxy, pass the browser's Host header through",
                host.unwrap_or("no Host")
            ),
        })
    }
}

/// Checks that a POST declares a JSON body (`application/json`, or `application/…+json`).
pub fn check_json(content_type: Option<&str>) -> Result<(), Refusal> {
    let essence = content_type
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let json = essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(Refusal {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            error: format!(
                "a POST to the admin API needs `Content-Type: application/json` (got {}), a \
                 body-less one too: a page of another site can send only form or text bodies \
                 without asking first. With curl: -H 'content-type: application/json' -d '{{}}'",
                content_type.map_or("none".to_owned(), |t| format!("{t:?}"))
            ),
        })
    }
}

/// Whether `method` can change something (and so gets the Origin and JSON checks).
fn is_action(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The middleware: every request passes [`check_host`]; a POST also [`check_origin`] and
/// [`check_json`].
pub async fn check(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host =
        text(headers, header::HOST).or_else(|| request.uri().authority().map(|a| a.as_str()));
    let mut verdict = check_host(host, &state.allowed_hosts);
    if verdict.is_ok() && is_action(request.method()) {
        verdict = check_origin(text(headers, header::ORIGIN), host)
            .and_then(|()| check_json(text(headers, header::CONTENT_TYPE)));
    }
    match verdict {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(method = %request.method(), path = %request.uri().path(), error = %refusal.error, "admin request refused");
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> Vec<String> {
        LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect()
    }

    #[test]
    fn loopback_names_pass_with_any_port_and_other_names_are_refused() {
        let allowed = loopback();
        for host in [
            "localhost",
            "localhost:9187",
            "LOCALHOST.:9187",
            "127.0.0.1:1",
            "[::1]:9187",
            "[::1]",
        ] {
            assert_eq!(check_host(Some(host), &allowed), Ok(()), "{host}");
        }
        for host in [
            Some("evil.example:9187"),
            Some("127.0.0.2:9187"),
            Some("localhost.evil.example"),
            Some(""),
            Some("a b"),
            None,
        ] {
            let refusal = check_host(host, &allowed).expect_err(&format!("{host:?}"));
            assert_eq!(refusal.status, StatusCode::FORBIDDEN);
            assert!(
                refusal.error.contains("--allowed-host"),
                "{}",
                refusal.error
            );
            assert!(refusal.error.contains("allow_hosts"), "{}", refusal.error);
        }
    }

    #[test]
    fn configured_names_and_the_wildcard_pass() {
        let allowed = vec!["Admin.Example:8443".to_owned(), "10.0.0.5".to_owned()];
        assert_eq!(check_host(Some("admin.example"), &allowed), Ok(()));
        assert_eq!(check_host(Some("10.0.0.5:9187"), &allowed), Ok(()));
        assert!(check_host(Some("localhost"), &allowed).is_err());
        assert_eq!(
            check_host(Some("anything:1"), &[ANY_HOST.to_owned()]),
            Ok(())
        );
    }

    #[test]
    fn only_a_post_from_this_server_s_own_pages_or_without_origin_passes() {
        let host = Some("127.0.0.1:9187");
        assert_eq!(check_origin(None, host), Ok(()));
        assert_eq!(check_origin(Some("http://127.0.0.1:9187"), host), Ok(()));
        assert_eq!(
            check_origin(Some("https://admin.example"), Some("admin.example")),
            Ok(())
        );
        assert_eq!(
            check_origin(Some("http://admin.example"), Some("admin.example:80")),
            Ok(())
        );
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:3000",
            "http://localhost:9187",
            "null",
            "not a uri",
        ] {
            let refusal = check_origin(Some(origin), host).expect_err(origin);
            assert_eq!(refusal.status, StatusCode::FORBIDDEN);
            assert!(refusal.error.contains("cross-origin"), "{}", refusal.error);
        }
        assert!(check_origin(Some("http://127.0.0.1:9187"), None).is_err());
    }

    #[test]
    fn only_a_json_content_type_passes() {
        for t in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert_eq!(check_json(Some(t)), Ok(()), "{t}");
        }
        for t in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            Some("application/jsonp"),
        ] {
            let refusal = check_json(t).expect_err(&format!("{t:?}"));
            assert_eq!(refusal.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
            assert!(refusal.error.contains("application/json"));
        }
    }
}
