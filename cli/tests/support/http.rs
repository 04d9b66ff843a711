//! A small blocking HTTP/1.1 client over a `TcpStream` (one request per connection): enough
//! for the admin API and a WebDriver server, without an HTTP client dependency.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A response.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// The body as JSON; panics (naming the body) if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` to `addr` (host:port) with an optional JSON `body`, as a tool does:
/// `Host: addr`, `Content-Type: application/json`, no `Origin`.
pub fn request(addr: &str, method: &str, path: &str, body: Option<&str>) -> Reply {
    request_with(addr, method, path, &[], body)
}

/// [`request`] with `headers` (lower-case names) replacing its own: a name with `None` is
/// not sent at all (`("content-type", None)`), one with a value is sent with it (`("host",
/// Some("evil.example"))`, `("origin", Some("http://evil.example"))`).
pub fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, Option<&str>)],
    body: Option<&str>,
) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let body = body.unwrap_or("");
    let mut lines: Vec<(String, String)> = vec![
        ("host".into(), addr.into()),
        ("connection".into(), "close".into()),
        ("accept".into(), "*/*".into()),
        ("content-type".into(), "application/json".into()),
    ];
    for (name, value) in headers {
        lines.retain(|(n, _)| n != name);
        if let Some(value) = value {
            lines.push(((*name).into(), (*value).into()));
        }
    }
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in lines {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).expect("write");
    stream.write_all(body.as_bytes()).expect("write");
    let raw = read_response(&mut stream);
    parse(&raw).unwrap_or_else(|| panic!("bad response: {}", String::from_utf8_lossy(&raw)))
}

/// Reads one response: up to its Content-Length, the end of its chunks, or the close (some
/// servers, chromedriver among them, keep the connection open despite `Connection: close`).
fn read_response(stream: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            let body = raw.len() - split - 4;
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body >= n) {
                return raw;
            }
            if head.contains("transfer-encoding: chunked") && raw.ends_with(b"0\r\n\r\n") {
                return raw;
            }
        }
        let n = stream.read(&mut buf).expect("read");
        if n == 0 {
            return raw;
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

fn parse(raw: &[u8]) -> Option<Reply> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body)?;
    }
    Some(Reply {
        status,
        headers,
        body: String::from_utf8(body).ok()?,
    })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

/// `request` on the blocking pool, for async tests whose runtime also serves the request.
pub async fn call(addr: &str, method: &str, path: &str, body: Option<&str>) -> Reply {
    call_with(addr, method, path, &[], body).await
}

/// `request_with` on the blocking pool.
pub async fn call_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, Option<&str>)],
    body: Option<&str>,
) -> Reply {
    let (addr, method, path) = (addr.to_owned(), method.to_owned(), path.to_owned());
    let headers: Vec<(String, Option<String>)> = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.map(str::to_owned)))
        .collect();
    let body = body.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let headers: Vec<(&str, Option<&str>)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_deref()))
            .collect();
        request_with(&addr, &method, &path, &headers, body.as_deref())
    })
    .await
    .expect("request task")
}

/// Serves `app` on a free loopback port in this runtime (the admin router mounted as an
/// application mounts it); returns host:port.
pub async fn mount(app: shardbox::admin::axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move { shardbox::admin::axum::serve(listener, app).await });
    addr
}
