//! The server against bad clients, through the real server on a loopback listener and raw
//! TCP streams. Every wait is bounded; a bound is a failure, never the thing measured.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Settings;
use crate::discovery::{self, Discovery, Limits};

/// How long a test waits for what it expects before it fails.
const BOUND: Duration = Duration::from_secs(30);

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Server {
    /// The discovery API (token `t`) with these limits.
    async fn start(settings: Settings) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let discovery = Arc::new(Discovery::new(
            Some("t"),
            proxy_core::lease::LeaseConfig::default(),
            Limits::default(),
        ));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(discovery::serve(discovery, listener, settings, async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            stop: Some(stop),
            task,
        }
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn settings(header: u64, request: u64, grace: u64) -> Settings {
    Settings {
        header_read_timeout: Duration::from_secs(header),
        request_timeout: Duration::from_secs(request),
        shutdown_grace: Duration::from_secs(grace),
    }
}

/// Reads until the server closes the connection; what it sent.
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server still held the connection after {BOUND:?}; it sent {:?}",
        String::from_utf8_lossy(&answer)
    );
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `bytes` one at a time, 50 ms apart, until the server closes the connection;
/// returns how many were sent.
async fn trickle(stream: TcpStream, bytes: &[u8]) -> usize {
    let (mut read, mut write) = stream.into_split();
    let closed = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = read.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    });
    for (sent, byte) in bytes.iter().enumerate() {
        if closed.is_finished() || write.write_all(&[*byte]).await.is_err() {
            return sent;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bytes.len()
}

#[tokio::test]
async fn a_slow_loris_client_sending_its_headers_a_byte_at_a_time_is_cut_off() {
    let server = Server::start(settings(1, 600, 1)).await;
    let stream = TcpStream::connect(server.addr).await.unwrap();
    // 600 bytes at 20 a second would hold the connection for 30 s.
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: {}\r\n\r\n",
        "a".repeat(560)
    );
    let sent = trickle(stream, head.as_bytes()).await;
    assert!(
        sent < head.len(),
        "the server let a client take {} bytes at 20 bytes/s to send its headers",
        head.len()
    );
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_header_timeout() {
    let server = Server::start(settings(1, 600, 1)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    assert_eq!(read_to_close(&mut stream).await, "");
}

#[tokio::test]
async fn a_body_that_trickles_in_gets_408_and_the_connection_closes() {
    let server = Server::start(settings(600, 1, 1)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let body = format!("{{\"target\": \"{}\"}}", "a".repeat(580));
    let head = format!(
        "POST /v1/leases HTTP/1.1\r\nhost: x\r\nauthorization: Bearer t\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let sent = trickle(stream, body.as_bytes()).await;
    assert!(
        sent < body.len(),
        "the server let a client take {} bytes at 20 bytes/s to send a body",
        body.len()
    );
}

#[tokio::test]
async fn the_408_names_the_timeout_and_closes_the_connection() {
    let server = Server::start(settings(600, 1, 1)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = "POST /v1/leases HTTP/1.1\r\nhost: x\r\nauthorization: Bearer t\r\ncontent-length: 100\r\n\r\n{";
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_to_close(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"error\":\"request_timeout\""), "{answer}");
}

#[tokio::test]
async fn shutdown_finishes_requests_in_flight_and_drops_a_stuck_client_after_the_grace() {
    let mut server = Server::start(settings(600, 600, 1)).await;
    // In flight: the head and half the body are in.
    let mut in_flight = TcpStream::connect(server.addr).await.unwrap();
    let body = br#"{"ttlSeconds": 0}"#;
    let head = format!(
        "POST /v1/leases HTTP/1.1\r\nhost: x\r\nauthorization: Bearer t\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    in_flight.write_all(head.as_bytes()).await.unwrap();
    in_flight.write_all(&body[..5]).await.unwrap();
    // Stuck: half a request head, never finished.
    let mut stuck = TcpStream::connect(server.addr).await.unwrap();
    stuck
        .write_all(b"GET /healthz HTTP/1.1\r\nhos")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    server.shut_down();
    tokio::time::sleep(Duration::from_millis(200)).await;
    in_flight.write_all(&body[5..]).await.unwrap();
    let answer = read_to_close(&mut in_flight).await;
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("invalid_ttl"),
        "the request in flight was answered: {answer}"
    );
    let stopped = tokio::time::timeout(BOUND, &mut server.task).await;
    assert!(
        stopped.is_ok(),
        "the server still ran {BOUND:?} after the shutdown signal (grace 1 s)"
    );
    assert_eq!(read_to_close(&mut stuck).await, "");
}
