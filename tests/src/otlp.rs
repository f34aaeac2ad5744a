//! A local OTLP/HTTP receiver, and the spans it got: what a collector would see of the
//! operator's traces (`OTEL_EXPORTER_OTLP_ENDPOINT`, with `OTEL_EXPORTER_OTLP_PROTOCOL`
//! `http/json` so that the bodies read as JSON).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;
use warp::Filter as _;

/// One POST the receiver got.
#[derive(Debug, Clone)]
pub struct Request {
    /// Its path (`/v1/traces`).
    pub path: String,
    /// Its `content-type`.
    pub content_type: Option<String>,
    /// Its body.
    pub body: Bytes,
}

/// Every POST a receiver got, in order.
pub type Received = Arc<Mutex<Vec<Request>>>;

/// Serves OTLP/HTTP on a free port of 127.0.0.1, on the current runtime, recording every
/// POST; its address, and what it records.
pub async fn serve() -> std::io::Result<(SocketAddr, Received)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let received: Received = Arc::default();
    let store = received.clone();
    let route = warp::post()
        .and(warp::path::full())
        .and(warp::header::optional::<String>("content-type"))
        .and(warp::body::bytes())
        .map(
            move |path: warp::path::FullPath, content_type: Option<String>, body: Bytes| {
                if let Ok(mut store) = store.lock() {
                    store.push(Request {
                        path: path.as_str().to_owned(),
                        content_type,
                        body,
                    });
                }
                warp::reply::with_header("{}", "content-type", "application/json")
            },
        );
    tokio::spawn(warp::serve(route).incoming(listener).run());
    Ok((addr, received))
}

/// One exported span, flattened out of an OTLP/JSON `ExportTraceServiceRequest`.
#[derive(Debug, Clone)]
pub struct ExportedSpan {
    /// The resource's `service.name`.
    pub service_name: Option<String>,
    /// The span's name.
    pub name: String,
    /// Its trace ID (hex).
    pub trace_id: String,
    /// Its span ID (hex).
    pub span_id: String,
    /// Its parent's span ID (hex; empty for a root).
    pub parent_span_id: String,
    /// Its attributes, by key (OTLP/JSON `AnyValue`s).
    pub attributes: HashMap<String, Value>,
}

impl ExportedSpan {
    /// The string attribute `key`, when the span has one.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.attributes
            .get(key)
            .and_then(|v| v["stringValue"].as_str())
    }
}

fn attributes(list: &Value) -> HashMap<String, Value> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| Some((kv["key"].as_str()?.to_owned(), kv["value"].clone())))
        .collect()
}

/// Every span of every OTLP/JSON request `received` holds. Fails on a body that is not JSON.
pub fn exported_spans(received: &[Request]) -> Vec<ExportedSpan> {
    let mut spans = Vec::new();
    for request in received {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_else(|e| {
            panic!(
                "OTLP body is not JSON ({e}): {}",
                String::from_utf8_lossy(&request.body)
            )
        });
        for resource_spans in body["resourceSpans"].as_array().into_iter().flatten() {
            let resource = attributes(&resource_spans["resource"]["attributes"]);
            let service_name = resource
                .get("service.name")
                .and_then(|v| v["stringValue"].as_str())
                .map(str::to_owned);
            for scope_spans in resource_spans["scopeSpans"]
                .as_array()
                .into_iter()
                .flatten()
            {
                for span in scope_spans["spans"].as_array().into_iter().flatten() {
                    let text = |key: &str| span[key].as_str().unwrap_or_default().to_owned();
                    spans.push(ExportedSpan {
                        service_name: service_name.clone(),
                        name: text("name"),
                        trace_id: text("traceId"),
                        span_id: text("spanId"),
                        parent_span_id: text("parentSpanId"),
                        attributes: attributes(&span["attributes"]),
                    });
                }
            }
        }
    }
    spans
}
