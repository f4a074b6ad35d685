//! Pure parsing of an HTTP/1.1 request head for the fake provider: request line,
//! case-insensitive headers, and the framing facts (`Content-Length`, `Transfer-Encoding`,
//! `Connection`, `Expect`) that decide how the body is read and whether the connection is
//! kept alive. Also the [`HttpError`] every read failure maps to.

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

/// The offset just past the blank line ending the head, if it has arrived.
pub(crate) fn find_head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = buf[from..].iter().position(|&b| b == b'\n') {
        let nl = from + p;
        let rest = &buf[nl + 1..];
        if rest.first() == Some(&b'\n') {
            return Some(nl + 2);
        }
        if rest.starts_with(b"\r\n") {
            return Some(nl + 3);
        }
        from = nl + 1;
    }
    None
}

/// Splits `buf` (a complete head) into line ranges without their line terminators.
fn lines(buf: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let nl = pos + buf[pos..].iter().position(|&b| b == b'\n')?;
        let end = if nl > pos && buf[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        let line = pos..end;
        pos = nl + 1;
        Some(line)
    })
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
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
    fn note(&mut self, name: &[u8], value: &[u8]) -> Result<(), HttpError> {
        let has = |token: &str| {
            value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        };
        if name.eq_ignore_ascii_case(b"content-length") {
            let parsed = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or(HttpError::Malformed("bad Content-Length"))?;
            if self.content_length.is_some_and(|old| old != parsed) {
                return Err(HttpError::Malformed("conflicting Content-Length"));
            }
            self.content_length = Some(parsed);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.chunked_or_coded = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            self.close |= has("close");
            self.keep_alive |= has("keep-alive");
        } else if name.eq_ignore_ascii_case(b"expect") {
            self.expect_continue |= has("100-continue");
        }
        Ok(())
    }
}

pub(crate) fn parse_head(buf: &[u8], headers: &mut Vec<HeaderPos>) -> Result<Head, HttpError> {
    headers.clear();
    let mut lines = lines(buf);
    let request_line = lines.next().ok_or(HttpError::Malformed("empty request"))?;
    let (method, target, http11) = parse_request_line(buf, request_line)?;
    let mut framing = Framing::default();
    for line in lines.take_while(|l| !l.is_empty()) {
        let text = &buf[line.clone()];
        if matches!(text.first(), Some(b' ' | b'\t')) {
            return Err(HttpError::Malformed("obsolete header line folding"));
        }
        let colon = text.iter().position(|&b| b == b':');
        let colon = colon.ok_or(HttpError::Malformed("header without colon"))?;
        if !is_token(&text[..colon]) {
            return Err(HttpError::Malformed("bad header name"));
        }
        let value = trim_range(buf, line.start + colon + 1..line.end);
        if headers.len() == MAX_HEADERS {
            return Err(HttpError::TooManyHeaders);
        }
        framing.note(&text[..colon], &buf[value.clone()])?;
        headers.push(HeaderPos {
            name: line.start..line.start + colon,
            value,
        });
    }
    let body_method = matches!(&buf[method.clone()], b"POST" | b"PUT" | b"PATCH");
    if framing.chunked_or_coded || (body_method && framing.content_length.is_none()) {
        return Err(HttpError::LengthRequired);
    }
    Ok(Head {
        method,
        target,
        len: buf.len(),
        content_length: framing.content_length.unwrap_or(0),
        keep_alive: !framing.close && (http11 || framing.keep_alive),
        expect_continue: framing.expect_continue,
    })
}

/// Method range, target range, and whether the version is HTTP/1.1.
fn parse_request_line(
    buf: &[u8],
    line: Range<usize>,
) -> Result<(Range<usize>, Range<usize>, bool), HttpError> {
    let text = &buf[line.clone()];
    let mut parts = text.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed("bad request line"));
    };
    if !is_token(method) {
        return Err(HttpError::Malformed("bad method"));
    }
    if target.is_empty() || !target.iter().all(|b| (0x21..0x7f).contains(b)) {
        return Err(HttpError::Malformed("bad request target"));
    }
    let http11 = match version {
        b"HTTP/1.1" => true,
        b"HTTP/1.0" => false,
        _ => return Err(HttpError::Version),
    };
    let method_start = line.start;
    let target_start = method_start + method.len() + 1;
    Ok((
        method_start..target_start - 1,
        target_start..target_start + target.len(),
        http11,
    ))
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
