//! A tiny HTTP/1.1 server on 127.0.0.1 for the client tests: records every request it
//! receives and answers with a scripted [`Reply`]. Deliberately minimal (one request per
//! connection, `Content-Length` bodies only) — the shared fake provider lives elsewhere.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// One request as the server received it.
#[derive(Debug)]
pub struct Captured {
    pub request_line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Captured {
    /// The first value of a header (names compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// What the server does after reading a request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Writes these bytes, then closes.
    Raw(String),
    /// A 200 without a length that never ends (until the client goes away).
    Endless,
    /// Sends nothing and keeps the connection open.
    Hang,
    /// Closes the connection without answering.
    Close,
}

/// A running server; stops with the test's runtime.
pub struct TestServer {
    pub addr: SocketAddr,
    pub requests: mpsc::UnboundedReceiver<Captured>,
    pub accepted: Arc<AtomicUsize>,
}

impl TestServer {
    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> url::Url {
        url::Url::parse(&format!("http://{}{path}", self.addr)).unwrap()
    }
}

/// A complete response with a `Content-Length` and `Connection: close`.
pub fn response(status_line: &str, headers: &[&str], body: &str) -> Reply {
    let mut text = format!("HTTP/1.1 {status_line}\r\nConnection: close\r\n");
    for header in headers {
        text.push_str(header);
        text.push_str("\r\n");
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    Reply::Raw(text)
}

pub async fn start(reply: Reply) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (sender, requests) = mpsc::unbounded_channel();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(handle(stream, reply.clone(), sender.clone()));
        }
    });
    TestServer {
        addr,
        requests,
        accepted,
    }
}

async fn handle(stream: TcpStream, reply: Reply, requests: mpsc::UnboundedSender<Captured>) {
    let mut reader = BufReader::new(stream);
    let Some(captured) = read_request(&mut reader).await else {
        return;
    };
    let _ = requests.send(captured);
    let mut stream = reader.into_inner();
    match reply {
        Reply::Raw(text) => {
            let _ = stream.write_all(text.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        Reply::Endless => {
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
            let _ = stream.write_all(head.as_bytes()).await;
            let chunk = vec![b' '; 8192];
            while stream.write_all(&chunk).await.is_ok() {}
        }
        Reply::Hang => {
            std::future::pending::<()>().await;
        }
        Reply::Close => drop(stream),
    }
}

async fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Captured> {
    let mut request_line = String::new();
    reader.read_line(&mut request_line).await.ok()?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let mut captured = Captured {
        request_line: request_line.trim_end().to_owned(),
        headers,
        body: Vec::new(),
    };
    let length: usize = captured
        .header("content-length")
        .unwrap_or("0")
        .parse()
        .ok()?;
    captured.body = vec![0; length];
    reader.read_exact(&mut captured.body).await.ok()?;
    Some(captured)
}
