//! Parsing of an HTTP/1.1 request head for the fake provider: `httparse` reads the request
//! line and headers; this module keeps where each part lies in the read buffer and the
//! framing facts (`Content-Length`, `Transfer-Encoding`, `Connection`, `Expect`) that decide
//! how the body is read and whether the connection is kept alive. Also the [`HttpError`]
//! every read failure maps to.

use std::ops::Range;

/// Most headers accepted in one request.
const MAX_HEADERS: usize = 128;

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// The request line and headers exceed the configured limit.
    #[error("request head larger than {0} bytes")]
    HeadTooLarge(usize),
    /// More than [`MAX_HEADERS`] header lines.
    #[error("more than {MAX_HEADERS} request headers")]
    TooManyHeaders,
    /// `Content-Length` exceeds the configured limit.
    #[error("request body larger than {0} bytes")]
    BodyTooLarge(usize),
    /// Chunked transfer coding, or a body-carrying method without `Content-Length`.
    #[error("request body without Content-Length")]
    LengthRequired,
    /// Syntax error in the request head.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    /// Not HTTP/1.0 or HTTP/1.1.
    #[error("unsupported HTTP version")]
    Version,
    /// The peer closed the connection in the middle of a request.
    #[error("connection closed mid-request")]
    Truncated,
    /// Socket error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl HttpError {
    /// The status to answer with before closing, if the peer can still be answered.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            HttpError::HeadTooLarge(_) | HttpError::TooManyHeaders => Some(431),
            HttpError::BodyTooLarge(_) => Some(413),
            HttpError::LengthRequired => Some(411),
            HttpError::Malformed(_) => Some(400),
            HttpError::Version => Some(505),
            HttpError::Truncated | HttpError::Io(_) => None,
        }
    }
}

/// Positions of one header inside the request's raw bytes.
#[derive(Debug, Clone)]
pub(crate) struct HeaderPos {
    /// The header name.
    pub(crate) name: Range<usize>,
    /// The value without surrounding whitespace.
    pub(crate) value: Range<usize>,
}

/// The parsed request head (positions relative to the start of the request).
#[derive(Debug)]
pub(crate) struct Head {
    /// The method token.
    pub(crate) method: Range<usize>,
    /// The request target.
    pub(crate) target: Range<usize>,
    /// Length of the head including the blank line; the body starts here.
    pub(crate) len: usize,
    /// Body length (0 when absent).
    pub(crate) content_length: usize,
    /// Whether the connection may serve another request afterwards.
    pub(crate) keep_alive: bool,
    /// The client waits for `100 Continue` before sending the body.
    pub(crate) expect_continue: bool,
}

/// Header facts that decide framing and connection reuse.
#[derive(Default)]
struct Framing {
    content_length: Option<usize>,
    chunked_or_coded: bool,
    close: bool,
    keep_alive: bool,
    expect_continue: bool,
}

impl Framing {
    fn note(&mut self, name: &str, value: &[u8]) -> Result<(), HttpError> {
        let has = |token: &str| {
            value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        };
        if name.eq_ignore_ascii_case("content-length") {
            let parsed = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or(HttpError::Malformed("bad Content-Length"))?;
            if self.content_length.is_some_and(|old| old != parsed) {
                return Err(HttpError::Malformed("conflicting Content-Length"));
            }
            self.content_length = Some(parsed);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            self.chunked_or_coded = true;
        } else if name.eq_ignore_ascii_case("connection") {
            self.close |= has("close");
            self.keep_alive |= has("keep-alive");
        } else if name.eq_ignore_ascii_case("expect") {
            self.expect_continue |= has("100-continue");
        }
        Ok(())
    }
}

/// Parses the head at the start of `buf`, filling `headers` with positions in `buf`.
///
/// `Ok(None)` while the head is incomplete (more bytes are needed). Empty lines before the
/// request line are tolerated (RFC 9112 section 2.2); the returned lengths count them.
pub(crate) fn parse_head(
    buf: &[u8],
    headers: &mut Vec<HeaderPos>,
) -> Result<Option<Head>, HttpError> {
    headers.clear();
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(refusal(e)),
    };
    let at = |part: &[u8]| offset_of(buf, part);
    let method = request
        .method
        .ok_or(HttpError::Malformed("bad request line"))?;
    let target = request
        .path
        .ok_or(HttpError::Malformed("bad request line"))?;
    if !target.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(HttpError::Malformed("bad request target"));
    }
    let http11 = request.version == Some(1);
    let mut framing = Framing::default();
    for header in request.headers.iter() {
        framing.note(header.name, header.value)?;
        let name = at(header.name.as_bytes());
        headers.push(HeaderPos {
            name: name..name + header.name.len(),
            value: trim_range(buf, at(header.value)..at(header.value) + header.value.len()),
        });
    }
    let body_method = matches!(method, "POST" | "PUT" | "PATCH");
    if framing.chunked_or_coded || (body_method && framing.content_length.is_none()) {
        return Err(HttpError::LengthRequired);
    }
    let method_at = at(method.as_bytes());
    let target_at = at(target.as_bytes());
    Ok(Some(Head {
        method: method_at..method_at + method.len(),
        target: target_at..target_at + target.len(),
        len,
        content_length: framing.content_length.unwrap_or(0),
        keep_alive: !framing.close && (http11 || framing.keep_alive),
        expect_continue: framing.expect_continue,
    }))
}

/// What `httparse` refused, as the error the connection answers with.
fn refusal(error: httparse::Error) -> HttpError {
    match error {
        httparse::Error::TooManyHeaders => HttpError::TooManyHeaders,
        httparse::Error::Version => HttpError::Version,
        httparse::Error::HeaderName => HttpError::Malformed("bad header name"),
        httparse::Error::HeaderValue => HttpError::Malformed("bad header value"),
        httparse::Error::NewLine => HttpError::Malformed("bad line ending"),
        httparse::Error::Token => HttpError::Malformed("bad method"),
        httparse::Error::Status => HttpError::Malformed("bad request line"),
    }
}

/// Where `part`, a sub-slice of `buf` handed out by `httparse`, starts in `buf`.
fn offset_of(buf: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - buf.as_ptr() as usize
}

/// Shrinks `range` to exclude leading and trailing spaces and tabs.
fn trim_range(buf: &[u8], mut range: Range<usize>) -> Range<usize> {
    while range.start < range.end && matches!(buf[range.start], b' ' | b'\t') {
        range.start += 1;
    }
    while range.end > range.start && matches!(buf[range.end - 1], b' ' | b'\t') {
        range.end -= 1;
    }
    range
}
