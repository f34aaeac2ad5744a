//! Canonical JSON: object keys sorted at every level, so that the same record always gives
//! the same bytes, whatever order serde or a `preserve_order` feature elsewhere in the build
//! gives map entries. Two recordings of the same calls then diff line by line.

use serde_json::Value;

/// `value` on one line, no whitespace, keys sorted.
pub(super) fn compact(value: &Value) -> String {
    let mut out = String::new();
    write(value, None, 0, &mut out);
    out
}

/// `value` indented by two spaces per level, keys sorted: for humans.
pub(super) fn pretty(value: &Value) -> String {
    let mut out = String::new();
    write(value, Some(2), 0, &mut out);
    out
}

fn write(value: &Value, indent: Option<usize>, depth: usize, out: &mut String) {
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * depth));
        }
    };
    match value {
        Value::Object(map) if !map.is_empty() => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write(value, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                write(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Where `a` and `b` first differ, as a JSON pointer (`/actions/2/Event/message`), visiting
/// object keys in sorted order; `None` when they are equal.
pub(super) fn first_difference(a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        // Two variants of an externally tagged enum (`{"Create":..}`, `{"Delete":..}`)
        // differ as a whole.
        (Value::Object(x), Value::Object(y))
            if x.len() == 1 && y.len() == 1 && x.keys().ne(y.keys()) =>
        {
            Some(String::new())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .find_map(|key| match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) => {
                        first_difference(p, q).map(|rest| format!("/{}{rest}", escape(key)))
                    }
                    (None, None) => None,
                    (Some(_), None) | (None, Some(_)) => Some(format!("/{}", escape(key))),
                })
        }
        (Value::Array(x), Value::Array(y)) => {
            let common =
                x.iter().zip(y).enumerate().find_map(|(i, (p, q))| {
                    first_difference(p, q).map(|rest| format!("/{i}{rest}"))
                });
            common.or_else(|| (x.len() != y.len()).then(|| format!("/{}", x.len().min(y.len()))))
        }
        (a, b) => (a != b).then(String::new),
    }
}

/// A key as a JSON pointer token (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sorts_keys_at_every_level() {
        let value = json!({"b": {"d": 1, "c": [{"z": 0, "y": "x"}]}, "a": null, "e": {}, "f": []});
        assert_eq!(
            compact(&value),
            r#"{"a":null,"b":{"c":[{"y":"x","z":0}],"d":1},"e":{},"f":[]}"#
        );
        assert_eq!(
            pretty(&json!({"b": [1], "a": {}})),
            "{\n  \"a\": {},\n  \"b\": [\n    1\n  ]\n}"
        );
    }

    #[test]
    fn finds_the_first_difference() {
        let a = json!({"actions": [{"X": 1}, {"Event": {"message": "a", "reason": "r"}}]});
        let b = json!({"actions": [{"X": 1}, {"Event": {"message": "b", "reason": "q"}}]});
        assert_eq!(
            first_difference(&a, &b).as_deref(),
            Some("/actions/1/Event/message")
        );
        assert_eq!(first_difference(&a, &a), None);
        assert_eq!(
            first_difference(&json!([1]), &json!([1, 2])).as_deref(),
            Some("/1")
        );
        assert_eq!(
            first_difference(&json!({"a/b": 1}), &json!({})).as_deref(),
            Some("/a~1b")
        );
        assert_eq!(first_difference(&json!(1), &json!(2)).as_deref(), Some(""));
        assert_eq!(
            first_difference(
                &json!({"a": [{"SetSpecHash": {}}]}),
                &json!({"a": [{"PatchStatus": {}}]})
            )
            .as_deref(),
            Some("/a/0")
        );
    }
}
