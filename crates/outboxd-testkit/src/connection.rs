//! One client connection of the fake provider: read a request, apply the configured latency,
//! process it under the state lock, then answer normally or carry out the selected
//! [`Fault`] exactly (silent close, RST, late answer, wrong status, huge or endless body,
//! redirect). Keep-alive until the client or a fault closes the connection.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use socket2::SockRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fault::Fault;
use super::http::Reader;
use super::ledger::Reply;
use super::parse::HttpError;
use super::response::{header_safe, render_reply, write_head, BodyLength, Writer};
use super::shared::Shared;
use super::ENDLESS_BODY_LIMIT;

/// Filler for huge and endless bodies.
static PAD: [u8; 32 * 1024] = [b'x'; 32 * 1024];
/// Opens the padding field of a huge JSON body (closed by `"}` after the filler).
const PAD_OPEN: &[u8] = b",\"padding\":\"";

/// Whether the connection can serve another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    KeepAlive,
    Close,
}

/// Serves requests on `stream` until it closes, a fault ends it, or the task is aborted.
pub(crate) async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let mut reader = Reader::new(shared.max_head, shared.max_body);
    let mut writer = Writer::default();
    loop {
        let request = match reader.next(&mut stream).await {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(err) => return refuse(&mut stream, &mut writer, &err).await,
        };
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let latency = shared.latency();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let (reply, fault) = shared.process(&request);
        let key = shared.key_of(&request);
        let close = !request.keep_alive();
        let next = respond(&mut stream, &mut writer, reply, key, fault, close).await;
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        if next.is_ok() {
            shared.responses_written.fetch_add(1, Ordering::SeqCst);
            shared.notify.notify_waiters();
        }
        reader.recycle(request);
        match next {
            Ok(Next::KeepAlive) => {}
            Ok(Next::Close) | Err(_) => return,
        }
    }
}

/// Answers an unreadable request with its error status, then closes gracefully (draining
/// briefly so the answer is not destroyed by an RST over unread bytes).
async fn refuse(stream: &mut TcpStream, writer: &mut Writer, err: &HttpError) {
    let Some(status) = err.status() else { return };
    if writer
        .send_error(stream, status, &err.to_string(), true, &[])
        .await
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut total = 0usize;
        while total < (1 << 20) {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
}

/// Sends the response for one processed request, as altered by `fault`.
async fn respond(
    stream: &mut TcpStream,
    w: &mut Writer,
    reply: Reply,
    key: Option<&str>,
    fault: Option<Fault>,
    close: bool,
) -> std::io::Result<Next> {
    let keep = if close { Next::Close } else { Next::KeepAlive };
    let Some(fault) = fault else {
        w.send_reply(stream, reply, key, close).await?;
        return Ok(keep);
    };
    match fault {
        Fault::LoseResponseAfterApply => return Ok(Next::Close),
        Fault::ResetAfterApply => {
            // Linger 0 turns the close into an RST; if it cannot be set, a FIN still ends it.
            let _ = SockRef::from(&*stream).set_linger(Some(Duration::ZERO));
            return Ok(Next::Close);
        }
        Fault::SleepAfterApply(pause) => {
            tokio::time::sleep(pause).await;
            w.send_reply(stream, reply, key, close).await?;
        }
        Fault::Status500AfterApply => w.send_error(stream, 500, "internal", close, &[]).await?,
        Fault::GarbageBodyAfterApply => {
            w.body.clear();
            w.body.extend_from_slice(b"<html>not json");
            w.send_body(stream, 200, "text/html", close, &[]).await?;
        }
        Fault::StatusWithoutApply {
            status,
            retry_after,
        } => {
            let value = retry_after.as_deref().map(header_safe);
            let extra: Vec<(&str, &str)> = value.iter().map(|v| ("Retry-After", &**v)).collect();
            w.send_error(stream, status, "injected", close, &extra)
                .await?;
        }
        Fault::HugeBodyAfterApply(size) => send_huge(stream, w, reply, key, size, close).await?,
        Fault::EndlessBodyAfterApply => {
            send_endless(stream, w).await?;
            return Ok(Next::Close);
        }
        Fault::RedirectWithoutApply(location) => {
            let location = header_safe(&location);
            let extra = [("Location", &*location)];
            w.send_error(stream, 302, "moved", close, &extra).await?;
        }
    }
    Ok(keep)
}

/// `200` with exactly `size` body bytes: the normal JSON plus a `padding` field when it fits,
/// otherwise plain filler.
async fn send_huge(
    stream: &mut TcpStream,
    w: &mut Writer,
    reply: Reply,
    key: Option<&str>,
    size: usize,
    close: bool,
) -> std::io::Result<()> {
    w.body.clear();
    render_reply(&mut w.body, reply, key);
    // Normal body minus its closing brace, the padding field, then `"}`.
    let overhead = w.body.len() - 1 + PAD_OPEN.len() + 2;
    let json = size >= overhead && w.body.last() == Some(&b'}');
    w.out.clear();
    write_head(
        &mut w.out,
        200,
        "application/json",
        BodyLength::Fixed(size),
        close,
        &[],
    );
    let mut filler = size;
    if json {
        w.out.extend_from_slice(&w.body[..w.body.len() - 1]);
        w.out.extend_from_slice(PAD_OPEN);
        filler = size - overhead;
    }
    stream.write_all(&w.out).await?;
    while filler > 0 {
        let n = filler.min(PAD.len());
        stream.write_all(&PAD[..n]).await?;
        filler -= n;
    }
    if json {
        stream.write_all(b"\"}").await?;
    }
    Ok(())
}

/// `200` with a chunked body that streams until the client goes away or
/// [`ENDLESS_BODY_LIMIT`] bytes were sent; the connection is closed afterwards.
async fn send_endless(stream: &mut TcpStream, w: &mut Writer) -> std::io::Result<()> {
    w.out.clear();
    write_head(
        &mut w.out,
        200,
        "application/json",
        BodyLength::Chunked,
        true,
        &[],
    );
    stream.write_all(&w.out).await?;
    w.out.clear();
    w.out
        .extend_from_slice(format!("{:x}\r\n", PAD.len()).as_bytes());
    w.out.extend_from_slice(&PAD);
    w.out.extend_from_slice(b"\r\n");
    let mut sent: u64 = 0;
    while sent < ENDLESS_BODY_LIMIT {
        stream.write_all(&w.out).await?;
        sent += PAD.len() as u64;
    }
    stream.write_all(b"0\r\n\r\n").await
}
