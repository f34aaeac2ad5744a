//! The operator's servers (discovery API, admin port) against bad clients, through the real
//! binary and raw TCP streams.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{Operator, Polls, binary};

/// An operator of its own namespace (no pods are needed), with `extra_args`.
async fn operator(prefix: &str, extra_args: &[&str]) -> Operator {
    let plane = ControlPlane::shared();
    let ns = plane.namespace(&plane.client().await, prefix).await;
    Operator::start_with(plane, &ns, binary(), Polls::FAST, None, extra_args)
}

/// `host:port` of a base URL such as `http://127.0.0.1:8090/metrics`.
fn host_port(url: &str) -> String {
    let rest = url.trim_start_matches("http://");
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// Connects to `url`'s server once it accepts connections.
fn connect(url: &str, operator: &Operator) -> TcpStream {
    let addr = host_port(url);
    for _ in 0..300 {
        if let Ok(stream) = TcpStream::connect(&addr) {
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            return stream;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{addr} never accepted a connection; operator log:\n{}",
        operator.log()
    );
}

/// Waits until the operator's log holds `line` at least `times` times; returns the log.
fn log_until(operator: &Operator, line: &str, times: usize) -> String {
    let mut log = String::new();
    for _ in 0..300 {
        log = operator.log();
        if log.matches(line).count() >= times {
            return log;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the operator did not log {line:?} {times} times:\n{log}");
}

#[tokio::test]
async fn a_malformed_request_is_refused_and_logged_at_debug_never_error() {
    let operator = operator("bad-client", &[]).await;
    for url in [&operator.discovery, &operator.metrics] {
        let mut stream = connect(url, &operator);
        // A header name with a space in it: hyper's Parse(Header(Token)).
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nbad header: 1\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "{url} answered {answer:?}"
        );
    }
    let log = log_until(&operator, "client connection ended with an error", 2);
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(r#""level":"ERROR""#))
        .collect();
    assert!(
        errors.is_empty(),
        "a client's malformed request was logged at ERROR:\n{}",
        errors.join("\n")
    );
    let debug = log
        .lines()
        .filter(|l| l.contains("client connection ended with an error"))
        .collect::<Vec<_>>();
    assert_eq!(debug.len(), 2, "one line per server: {debug:?}");
    assert!(
        debug
            .iter()
            .all(|l| l.contains(r#""level":"DEBUG""#) && l.contains("invalid HTTP header parsed")),
        "{debug:?}"
    );
}

#[tokio::test]
async fn sigterm_finishes_within_the_grace_though_a_client_is_stuck() {
    // Timeouts far longer than the bound below: only the grace can end the stuck connection.
    let mut operator = operator(
        "grace",
        &[
            "--shutdown-grace-seconds",
            "1",
            "--http-header-timeout-seconds",
            "600",
            "--http-request-timeout-seconds",
            "600",
        ],
    )
    .await;
    log_until(&operator, "discovery API listening", 1);
    // Half a request head, never finished.
    let mut stuck = connect(&operator.discovery, &operator);
    stuck.write_all(b"GET /healthz HTTP/1.1\r\nhos").unwrap();
    let mut healthz = connect(&operator.discovery, &operator);
    healthz
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut answer = [0u8; 12];
    healthz.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200", "the API serves before SIGTERM");

    let exit = operator.terminate(Duration::from_secs(60));
    let log = operator.log();
    let exit =
        exit.unwrap_or_else(|| panic!("still running 60 s after SIGTERM (grace 1 s); log:\n{log}"));
    assert!(exit.success(), "exit {exit}; log:\n{log}");
    assert!(
        log.contains("connections still open after the shutdown grace: closing them"),
        "{log}"
    );
}
