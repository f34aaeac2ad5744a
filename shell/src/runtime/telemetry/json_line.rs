//! The JSON log line: one object per event, each key once.
//!
//! `tracing-subscriber`'s own JSON format writes an event's fields as they come, and a field
//! the event names like its message (`warn!(message = %error, "a call failed")`) came out
//! as a second `message` key in the same object: most log pipelines keep only one of the
//! two, and a strict JSON reader refuses the line (issue 50). Here every object is built as
//! a map first: a key that comes again is kept under a numbered name (`message_2`), so no
//! value is lost and no key repeats. The shape is `tracing-subscriber`'s: `timestamp`,
//! `level`, `fields` (the message among them), `target`, `span` and `spans` (each with its
//! `name` and fields) when the event is in one, and the innermost span's `trace_id` and
//! `span_id` ([`super::WithTraceIds`] for text lines).

use std::fmt;

use opentelemetry::trace::SpanContext;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats each event as one JSON object on one line, each key once.
#[derive(Debug, Default)]
pub struct JsonLine;

/// Inserts `value` under `key`, or under the first of `key_2`, `key_3`, ... that is free
/// when `key` is taken.
pub fn insert_unique(map: &mut Map<String, Value>, key: &str, value: Value) {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), value);
        return;
    }
    let free = (2u32..)
        .map(|n| format!("{key}_{n}"))
        .find(|candidate| !map.contains_key(candidate));
    if let Some(free) = free {
        map.insert(free, value);
    }
}

/// An event's fields, as JSON values, each name once.
#[derive(Default)]
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        insert_unique(&mut self.0, field.name(), Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        insert_unique(&mut self.0, field.name(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        insert_unique(&mut self.0, field.name(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        insert_unique(&mut self.0, field.name(), Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        insert_unique(&mut self.0, field.name(), Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        insert_unique(&mut self.0, field.name(), Value::from(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        insert_unique(&mut self.0, field.name(), Value::from(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".to_owned(),
            Value::from(format!("{:.6}", jiff::Timestamp::now())),
        );
        line.insert("level".to_owned(), Value::from(metadata.level().as_str()));
        let mut fields = Fields::default();
        event.record(&mut fields);
        line.insert("fields".to_owned(), Value::Object(fields.0));
        line.insert("target".to_owned(), Value::from(metadata.target()));
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope
                .from_root()
                .map(|span| {
                    let mut object = Map::new();
                    object.insert("name".to_owned(), Value::from(span.name()));
                    let extensions = span.extensions();
                    // The layer's `JsonFields` keep a span's fields as one JSON object.
                    if let Some(Value::Object(recorded)) = extensions
                        .get::<FormattedFields<N>>()
                        .and_then(|formatted| serde_json::from_str(formatted.as_str()).ok())
                    {
                        for (key, value) in recorded {
                            insert_unique(&mut object, &key, value);
                        }
                    }
                    Value::Object(object)
                })
                .collect();
            if let Some(innermost) = spans.last() {
                line.insert("span".to_owned(), innermost.clone());
            }
            line.insert("spans".to_owned(), Value::Array(spans));
        }
        if let Some(ids) = super::event_span_context(ctx) {
            insert_ids(&mut line, &ids);
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// The trace and span IDs of the event's innermost span, as top-level keys.
fn insert_ids(line: &mut Map<String, Value>, ids: &SpanContext) {
    line.insert(
        "trace_id".to_owned(),
        Value::from(ids.trace_id().to_string()),
    );
    line.insert("span_id".to_owned(), Value::from(ids.span_id().to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_kept_under_a_numbered_name() {
        let mut map = Map::new();
        insert_unique(&mut map, "message", Value::from("the call failed"));
        insert_unique(&mut map, "message", Value::from("HTTP 503"));
        insert_unique(&mut map, "message", Value::from("third"));
        insert_unique(&mut map, "other", Value::from(1));
        assert_eq!(
            Value::Object(map),
            serde_json::json!({
                "message": "the call failed",
                "message_2": "HTTP 503",
                "message_3": "third",
                "other": 1
            })
        );
    }
}
