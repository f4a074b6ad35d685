//! The fake provider's per-connection request reader: buffers bytes, waits for a complete
//! head and `Content-Length` body, answers `Expect: 100-continue`, keeps pipelined leftovers
//! for the next call, and hands out [`Request`]s that share the read buffer (no copying).
//! Head parsing (`httparse`) lives in [`super::parse`]; responses are written by [`super::response`].

use std::mem;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::parse::{parse_head, Head, HeaderPos, HttpError};

/// How much buffer space to offer each read while waiting for a request head.
const READ_CHUNK: usize = 8 * 1024;

/// One complete request: its raw bytes (head and body) and where things are in them.
#[derive(Debug)]
pub(crate) struct Request {
    raw: Bytes,
    head: Head,
    headers: Vec<HeaderPos>,
}

impl Request {
    fn text(&self, range: &Range<usize>) -> &str {
        // Method and target were checked to be ASCII while parsing.
        std::str::from_utf8(&self.raw[range.clone()]).unwrap_or("")
    }

    /// The method, e.g. `POST`.
    pub(crate) fn method(&self) -> &str {
        self.text(&self.head.method)
    }

    /// The request target as sent (path and query).
    pub(crate) fn target(&self) -> &str {
        self.text(&self.head.target)
    }

    /// The raw value of the first header with this name (compared case-insensitively).
    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| self.raw[h.name.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .map(|h| &self.raw[h.value.clone()])
    }

    /// All headers, names lowercased, values as lossy UTF-8.
    pub(crate) fn headers_lowercased(&self) -> Vec<(String, String)> {
        let text = |r: &Range<usize>| String::from_utf8_lossy(&self.raw[r.clone()]).into_owned();
        self.headers
            .iter()
            .map(|h| (text(&h.name).to_ascii_lowercase(), text(&h.value)))
            .collect()
    }

    /// The body (shares the request's buffer).
    pub(crate) fn body(&self) -> Bytes {
        self.raw.slice(self.head.len..)
    }

    /// Whether the connection may serve another request afterwards.
    pub(crate) fn keep_alive(&self) -> bool {
        self.head.keep_alive
    }
}

/// Reads requests from one connection, keeping leftover (pipelined) bytes between calls.
#[derive(Debug)]
pub(crate) struct Reader {
    buf: BytesMut,
    spare_headers: Vec<HeaderPos>,
    max_head: usize,
    max_body: usize,
}

impl Reader {
    /// A reader with these head and body limits.
    pub(crate) fn new(max_head: usize, max_body: usize) -> Self {
        Reader {
            buf: BytesMut::with_capacity(READ_CHUNK),
            spare_headers: Vec::with_capacity(16),
            max_head,
            max_body,
        }
    }

    /// The next complete request; `Ok(None)` on a clean close between requests.
    pub(crate) async fn next(
        &mut self,
        stream: &mut TcpStream,
    ) -> Result<Option<Request>, HttpError> {
        let mut head: Option<Head> = None;
        let mut sent_continue = false;
        loop {
            if head.is_none() {
                head = self.try_parse_head()?;
            }
            let want = match &head {
                Some(h) => {
                    let total = h.len + h.content_length;
                    if self.buf.len() >= total {
                        return Ok(head.map(|h| self.take(h)));
                    }
                    if h.expect_continue && !sent_continue {
                        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
                        sent_continue = true;
                    }
                    total - self.buf.len()
                }
                None => READ_CHUNK,
            };
            self.buf.reserve(want);
            if stream.read_buf(&mut self.buf).await? == 0 {
                return match head.is_none() && self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(HttpError::Truncated),
                };
            }
        }
    }

    /// Gives a finished request's header list back for reuse.
    pub(crate) fn recycle(&mut self, request: Request) {
        let mut headers = request.headers;
        headers.clear();
        self.spare_headers = headers;
    }

    fn try_parse_head(&mut self) -> Result<Option<Head>, HttpError> {
        // Tolerate empty lines before a request line (RFC 9112 section 2.2).
        let blank = self
            .buf
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        let _ = self.buf.split_to(blank);
        let limit = self.buf.len().min(self.max_head);
        let Some(head) = parse_head(&self.buf[..limit], &mut self.spare_headers)? else {
            return match self.buf.len() > self.max_head {
                true => Err(HttpError::HeadTooLarge(self.max_head)),
                false => Ok(None),
            };
        };
        if head.content_length > self.max_body {
            return Err(HttpError::BodyTooLarge(self.max_body));
        }
        Ok(Some(head))
    }

    fn take(&mut self, head: Head) -> Request {
        let raw = self.buf.split_to(head.len + head.content_length).freeze();
        let headers = mem::take(&mut self.spare_headers);
        Request { raw, head, headers }
    }
}
