//! `telemetry::init` end to end: spans exported to a local OTLP/HTTP receiver, and log lines
//! carrying the trace IDs of those spans (with and without an endpoint, JSON and text).
//!
//! A process has one global subscriber and `telemetry::init` reads its configuration from the
//! environment (which edition-2024 code may not change without `unsafe`), so each scenario
//! runs `telemetry-child` (`tests/src/bin/telemetry-child.rs`) with the environment under
//! test, and the test asserts on the child's standard output (the log lines `init` writes
//! there) and on what the receiver got.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proxy_tests::otlp::{self, ExportedSpan, exported_spans};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Parent side.

/// Runs `telemetry-child` for the scenario `child` in a fresh process with `env` on top of an
/// environment cleared of OpenTelemetry variables; returns its standard output.
fn run_child(child: &str, env: &[(&str, &str)]) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let stdout_path = dir.join(format!("telemetry-{child}-{}.stdout", std::process::id()));
    let stderr_path = dir.join(format!("telemetry-{child}-{}.stderr", std::process::id()));
    let stdout = std::fs::File::create(&stdout_path).expect("create child stdout file");
    let stderr = std::fs::File::create(&stderr_path).expect("create child stderr file");

    let mut command = Command::new(env!("CARGO_BIN_EXE_telemetry-child"));
    command
        .arg(child)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    for var in std::env::vars_os().map(|(name, _)| name) {
        if var.to_string_lossy().starts_with("OTEL_") {
            command.env_remove(var);
        }
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut process = command.spawn().expect("spawn the child test process");
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = process.try_wait().expect("wait for the child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = process.kill();
            let _ = process.wait();
            panic!("child {child} did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&stdout_path).expect("read child stdout");
    let stderr = std::fs::read_to_string(&stderr_path).expect("read child stderr");
    let _ = std::fs::remove_file(&stdout_path);
    let _ = std::fs::remove_file(&stderr_path);
    assert!(
        status.success(),
        "child {child} failed ({status})\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    stdout
}

/// The JSON log lines in a child's output (the test harness's own lines are not JSON).
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|line| line.find('{').map(|start| &line[start..]))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect()
}

/// The one log line with this message inside a span with this `proxy` field.
fn log_line<'a>(lines: &'a [Value], message: &str, proxy: Option<&str>) -> &'a Value {
    let found: Vec<&Value> = lines
        .iter()
        .filter(|line| line["fields"]["message"] == message)
        .filter(|line| proxy.is_none_or(|proxy| line["span"]["proxy"] == proxy))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one log line {message:?} (proxy {proxy:?}) expected in {lines:#?}"
    );
    found[0]
}

fn hex_id(line: &Value, key: &str, digits: usize) -> String {
    let id = line[key]
        .as_str()
        .unwrap_or_else(|| panic!("log line without {key}: {line}"));
    assert_eq!(id.len(), digits, "{key} {id:?} has {digits} hex digits");
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert!(id.bytes().any(|b| b != b'0'), "{key} is not all zeros");
    id.to_owned()
}

/// A local OTLP/HTTP receiver ([`otlp::serve`]) on a runtime of its own: the tests here are
/// synchronous, each running a child process.
struct Receiver {
    addr: SocketAddr,
    received: otlp::Received,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("receiver runtime");
        let (addr, received) = runtime.block_on(otlp::serve()).expect("start the receiver");
        Receiver {
            addr,
            received,
            _runtime: runtime,
        }
    }

    fn received(&self) -> Vec<otlp::Request> {
        self.received.lock().expect("receiver store").clone()
    }
}

fn exported<'a>(spans: &'a [ExportedSpan], name: &str, proxy: &str) -> &'a ExportedSpan {
    let found: Vec<&ExportedSpan> = spans
        .iter()
        .filter(|span| span.name == name)
        .filter(|span| {
            span.attributes
                .get("proxy")
                .and_then(|v| v["stringValue"].as_str())
                == Some(proxy)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one exported span {name:?} with proxy={proxy:?} expected in {spans:#?}"
    );
    found[0]
}

#[test]
fn exports_spans_over_otlp_http_with_the_trace_ids_of_the_logs() {
    let receiver = Receiver::start();
    let endpoint = format!("http://{}", receiver.addr);
    let stdout = run_child(
        "with-endpoint",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            // Export at shutdown at the latest; the guard's drop must flush.
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    );

    // The child has exited: whatever it exported has been received.
    let received = receiver.received();
    assert!(
        !received.is_empty(),
        "the receiver got nothing; child output:\n{stdout}"
    );
    for request in &received {
        assert_eq!(request.path, "/v1/traces");
        assert_eq!(request.content_type.as_deref(), Some("application/json"));
    }
    let spans = exported_spans(&received);
    let lines = json_lines(&stdout);

    for span in &spans {
        assert_eq!(
            span.service_name.as_deref(),
            Some("proxy-operator"),
            "{span:?}"
        );
    }
    let mut trace_ids = Vec::new();
    for proxy in ["default/alpha", "default/beta"] {
        let reconcile = exported(&spans, "reconcile", proxy);
        let provider = exported(&spans, "provider", proxy);
        assert_eq!(
            provider.trace_id, reconcile.trace_id,
            "one trace per reconcile"
        );
        assert_eq!(
            provider.parent_span_id, reconcile.span_id,
            "provider span is a child"
        );
        assert_eq!(provider.attributes["op"]["stringValue"], "create");

        for message in ["reconciling", "reconciled"] {
            let line = log_line(&lines, message, Some(proxy));
            assert_eq!(hex_id(line, "trace_id", 32), reconcile.trace_id, "{line}");
            assert_eq!(hex_id(line, "span_id", 16), reconcile.span_id, "{line}");
        }
        let line = log_line(&lines, "creating machine", Some(proxy));
        assert_eq!(hex_id(line, "trace_id", 32), provider.trace_id, "{line}");
        assert_eq!(hex_id(line, "span_id", 16), provider.span_id, "{line}");
        trace_ids.push(reconcile.trace_id.clone());
    }
    assert_ne!(
        trace_ids[0], trace_ids[1],
        "each reconcile is its own trace"
    );

    let outside = log_line(&lines, "outside any span", None);
    assert!(outside.get("trace_id").is_none(), "{outside}");
    assert!(outside.get("span_id").is_none(), "{outside}");
}

#[test]
fn without_an_endpoint_nothing_is_exported_but_logs_carry_trace_ids() {
    // The child asserts that no exporter is built (`is_exporting()` is false).
    let stdout = run_child("without-endpoint", &[]);
    let lines = json_lines(&stdout);

    let mut trace_ids = Vec::new();
    for proxy in ["default/alpha", "default/beta"] {
        let reconciling = log_line(&lines, "reconciling", Some(proxy));
        let reconciled = log_line(&lines, "reconciled", Some(proxy));
        let creating = log_line(&lines, "creating machine", Some(proxy));
        let trace_id = hex_id(reconciling, "trace_id", 32);
        let span_id = hex_id(reconciling, "span_id", 16);
        assert_eq!(hex_id(reconciled, "trace_id", 32), trace_id);
        assert_eq!(hex_id(reconciled, "span_id", 16), span_id);
        assert_eq!(
            hex_id(creating, "trace_id", 32),
            trace_id,
            "child span, same trace"
        );
        assert_ne!(
            hex_id(creating, "span_id", 16),
            span_id,
            "child span, own span ID"
        );
        trace_ids.push(trace_id);
    }
    assert_ne!(
        trace_ids[0], trace_ids[1],
        "each reconcile is its own trace"
    );

    let outside = log_line(&lines, "outside any span", None);
    assert!(outside.get("trace_id").is_none(), "{outside}");
}

#[test]
fn every_json_line_has_each_key_once_and_keeps_every_value() {
    let stdout = run_child("without-endpoint", &[]);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('{')).collect();
    assert!(!lines.is_empty(), "{stdout}");
    for line in &lines {
        assert_eq!(proxy_tests::log_lines::problem(line), None, "{line}");
    }
    // A field named like the message keeps its value under a key of its own, and so does a
    // span field named like the span's name.
    let parsed = json_lines(&stdout);
    for proxy in ["default/alpha", "default/beta"] {
        let failed = parsed
            .iter()
            .find(|l| {
                l["fields"]["message"] == "provider call failed" && l["spans"][0]["proxy"] == proxy
            })
            .unwrap_or_else(|| panic!("no 'provider call failed' line of {proxy} in:\n{stdout}"));
        assert_eq!(failed["fields"]["message_2"], "HTTP 503", "{failed}");
        assert_eq!(failed["span"]["name"], "compute", "{failed}");
        assert_eq!(failed["span"]["name_2"], "instances.insert", "{failed}");
    }
}

#[test]
fn text_lines_end_with_the_trace_ids() {
    let stdout = run_child("text", &[]);
    let line = stdout
        .lines()
        .find(|line| line.contains("reconciling") && line.contains("proxy=default/alpha"))
        .unwrap_or_else(|| panic!("no text line for the alpha reconcile in:\n{stdout}"));
    let (_, ids) = line
        .rsplit_once(" trace_id=")
        .unwrap_or_else(|| panic!("no trace_id in {line:?}"));
    let (trace_id, span_id) = ids
        .split_once(" span_id=")
        .unwrap_or_else(|| panic!("no span_id in {line:?}"));
    assert_eq!(trace_id.len(), 32, "{line:?}");
    assert_eq!(span_id.len(), 16, "{line:?}");
    assert!(
        trace_id
            .chars()
            .chain(span_id.chars())
            .all(|c| c.is_ascii_hexdigit())
    );
    assert!(!line.contains('\x1b'), "no colour codes: {line:?}");

    let outside = stdout
        .lines()
        .find(|line| line.contains("outside any span"))
        .unwrap_or_else(|| panic!("no line outside a span in:\n{stdout}"));
    assert!(!outside.contains("trace_id="), "{outside:?}");
}
