//! The fake provider's response wire format: status line and headers ([`write_head`]), the
//! JSON bodies of each endpoint reply ([`render_reply`]), and [`Writer`], which assembles a
//! whole response in a reused buffer and sends it with one write call.

use std::borrow::Cow;
use std::io::Write as _;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::ledger::Reply;

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLength {
    /// `Content-Length: n`.
    Fixed(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// No body at all (1xx, 204, 304): no length header.
    Empty,
}

/// Appends a status line and headers (ending with the blank line) to `out`.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    status: u16,
    content_type: &str,
    length: BodyLength,
    close: bool,
    extra: &[(&str, &str)],
) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason(status));
    if length != BodyLength::Empty {
        let _ = write!(out, "Content-Type: {content_type}\r\n");
    }
    match length {
        BodyLength::Fixed(n) => {
            let _ = write!(out, "Content-Length: {n}\r\n");
        }
        BodyLength::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        BodyLength::Empty => {}
    }
    for (name, value) in extra {
        let _ = write!(out, "{name}: {value}\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The reason phrase for common statuses (clients ignore it; it helps humans reading dumps).
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// Removes CR and LF so a configured value cannot break out of its header line.
pub(crate) fn header_safe(value: &str) -> Cow<'_, str> {
    if value.contains(['\r', '\n']) {
        Cow::Owned(value.replace(['\r', '\n'], ""))
    } else {
        Cow::Borrowed(value)
    }
}

/// Appends the JSON body for `reply` to `body` and returns its status code.
pub(crate) fn render_reply(body: &mut Vec<u8>, reply: Reply, key: Option<&str>) -> u16 {
    match reply {
        Reply::Applied {
            reference,
            replayed,
        } => {
            let _ = write!(body, "{{\"id\":\"ref_{reference}\",\"idempotency_key\":");
            // Serializing a str into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *body, &key);
            let _ = write!(body, ",\"replayed\":{replayed}}}");
            200
        }
        Reply::Found { reference } => {
            let _ = write!(body, "{{\"id\":\"ref_{reference}\"}}");
            200
        }
        Reply::NotFound => error_body(body, 404, "not_found"),
        Reply::MissingKey => error_body(body, 400, "missing_idempotency_key"),
        Reply::BadLookupKey => error_body(body, 400, "bad_lookup_key"),
        // Only "without apply" faults skip processing, and they answer themselves.
        Reply::Skipped => error_body(body, 500, "not_processed"),
    }
}

/// Appends `{"error":"<code>"}` and returns `status`.
pub(crate) fn error_body(body: &mut Vec<u8>, status: u16, code: &str) -> u16 {
    body.extend_from_slice(b"{\"error\":");
    let _ = serde_json::to_writer(&mut *body, code);
    body.push(b'}');
    status
}

/// Reusable response buffers of one connection.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    /// The whole response (head and body) about to be written.
    pub(crate) out: Vec<u8>,
    /// Scratch space for a body whose length must be known before the head.
    pub(crate) body: Vec<u8>,
}

impl Writer {
    /// Sends the endpoint's normal response for `reply` in one write.
    pub(crate) async fn send_reply(
        &mut self,
        stream: &mut TcpStream,
        reply: Reply,
        key: Option<&str>,
        close: bool,
    ) -> std::io::Result<()> {
        self.body.clear();
        let status = render_reply(&mut self.body, reply, key);
        self.send_body(stream, status, "application/json", close, &[])
            .await
    }

    /// Sends `{"error":"<code>"}` with this status and extra headers in one write.
    pub(crate) async fn send_error(
        &mut self,
        stream: &mut TcpStream,
        status: u16,
        code: &str,
        close: bool,
        extra: &[(&str, &str)],
    ) -> std::io::Result<()> {
        self.body.clear();
        error_body(&mut self.body, status, code);
        self.send_body(stream, status, "application/json", close, extra)
            .await
    }

    /// Sends `self.body` with this status, content type and extra headers in one write.
    pub(crate) async fn send_body(
        &mut self,
        stream: &mut TcpStream,
        status: u16,
        content_type: &str,
        close: bool,
        extra: &[(&str, &str)],
    ) -> std::io::Result<()> {
        let no_body = matches!(status, 100..=199 | 204 | 304);
        let length = match no_body {
            true => BodyLength::Empty,
            false => BodyLength::Fixed(self.body.len()),
        };
        self.out.clear();
        write_head(&mut self.out, status, content_type, length, close, extra);
        if !no_body {
            self.out.extend_from_slice(&self.body);
        }
        stream.write_all(&self.out).await
    }
}
