//! One bounded scrape of a component's Prometheus endpoint over plain HTTP/1.0: at most [`MAX_BODY`] bytes within [`TIMEOUT`], a refused connection told apart from other failures.
//!
//! HTTP/1.0 without `Accept-Encoding` makes the server answer with the whole body, neither
//! chunked nor compressed, and close the connection: the body is what is read until then.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The most one scrape reads, headers included: 4 MiB, about 40 times what kube-proxy
/// serves (its `/metrics` is about 100 KB with the Go runtime's and client-go's metrics).
pub const MAX_BODY: usize = 4 << 20;

/// The longest one scrape may take, connect to last byte: 2 s.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// Where a component serves its metrics: `http://HOST:PORT/PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsUrl {
    /// `HOST:PORT` to connect to (`[::1]:10249` for IPv6), also the `Host` header.
    pub authority: String,
    /// The path with its query (`/metrics`).
    pub path: String,
}

impl MetricsUrl {
    /// Parses `http://HOST[:PORT][/PATH]` (port 80 by default, path `/` by default).
    pub fn parse(s: &str) -> Result<Self, String> {
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| format!("`{s}` is not an http:// URL (https is not read)"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("`{s}` has no host (or has credentials)"));
        }
        let has_port = match authority.rfind(']') {
            Some(end) => authority[end..].contains(':'),
            None => authority.contains(':'),
        };
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("`{s}` has whitespace in its path"));
        }
        Ok(Self {
            authority,
            path: path.to_string(),
        })
    }
}

impl std::fmt::Display for MetricsUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

/// Why a scrape failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScrapeError {
    /// Nothing listens at the address.
    #[error("connection to {0} refused: nothing listens there")]
    Refused(String),
    /// No complete answer within [`TIMEOUT`].
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
    /// The answer is over [`MAX_BODY`].
    #[error("the answer is over {0} bytes")]
    TooLarge(usize),
    /// Not an HTTP 200 answer with a body.
    #[error("bad answer: {0}")]
    Http(String),
    /// Another connection or read error.
    #[error("{0}")]
    Io(String),
}

impl ScrapeError {
    /// Nothing listens at the address.
    pub fn is_refused(&self) -> bool {
        matches!(self, ScrapeError::Refused(_))
    }
}

/// GETs `url` within `timeout`, reading at most `max` bytes; the body as text.
pub async fn scrape(
    url: &MetricsUrl,
    timeout: Duration,
    max: usize,
) -> Result<String, ScrapeError> {
    match tokio::time::timeout(timeout, get(url, max)).await {
        Ok(r) => r,
        Err(_) => Err(ScrapeError::Timeout(timeout)),
    }
}

async fn get(url: &MetricsUrl, max: usize) -> Result<String, ScrapeError> {
    let mut stream = TcpStream::connect(&url.authority)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => ScrapeError::Refused(url.authority.clone()),
            _ => ScrapeError::Io(format!("connecting to {}: {e}", url.authority)),
        })?;
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nAccept: text/plain\r\nUser-Agent: ghostip\r\n\r\n",
        url.path, url.authority
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| ScrapeError::Io(format!("sending the request: {e}")))?;
    let mut buf = Vec::with_capacity(128 << 10);
    let mut limited = (&mut stream).take(max as u64 + 1);
    limited
        .read_to_end(&mut buf)
        .await
        .map_err(|e| ScrapeError::Io(format!("reading the answer: {e}")))?;
    if buf.len() > max {
        return Err(ScrapeError::TooLarge(max));
    }
    body(&buf)
}

/// The body of a complete HTTP/1.x answer, when its status is 200 and it is neither chunked
/// nor compressed.
fn body(answer: &[u8]) -> Result<String, ScrapeError> {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| ScrapeError::Http("no end of headers".into()))?;
    let head = String::from_utf8_lossy(&answer[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/1.") || code != "200" {
        return Err(ScrapeError::Http(format!(
            "status line `{}`",
            status.chars().take(80).collect::<String>()
        )));
    }
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "transfer-encoding" && !value.eq_ignore_ascii_case("identity") {
            return Err(ScrapeError::Http(format!("transfer-encoding {value}")));
        }
        if name == "content-encoding" && !value.eq_ignore_ascii_case("identity") {
            return Err(ScrapeError::Http(format!("content-encoding {value}")));
        }
    }
    String::from_utf8(answer[end + 4..].to_vec())
        .map_err(|_| ScrapeError::Http("the body is not UTF-8".into()))
}
