//! `docs/openapi.yaml` as a judge of real exchanges with the discovery API (test-only): a
//! request, as a client sent it, and the answer it got are held to the operation the
//! document lists for them: the path and method, the path and query parameters, the request
//! body against its schema, the status, and the answer's body against that status's schema.
//! The schemas are JSON Schema 2020-12 (OpenAPI 3.1's), checked by the `jsonschema` crate,
//! with the document's `components` in reach of every `$ref`.
//!
//! The discovery API's route tests hold the server to the document; this holds a client to
//! it, the gateway's book client first: both ends of the contract.

use serde_json::{Map, Value};

/// One request to the discovery API and its answer, as they went over the wire.
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query's pairs, decoded.
    pub query: Vec<(String, String)>,
    /// The request body (empty when none was sent).
    pub body: Vec<u8>,
    pub status: u16,
    pub answer: Vec<u8>,
}

/// The document, read once.
pub(crate) struct Contract {
    doc: Value,
}

impl Contract {
    pub(crate) fn load() -> Self {
        let doc = serde_saphyr::from_str(include_str!("../../../docs/openapi.yaml"))
            .expect("docs/openapi.yaml parses");
        Self { doc }
    }

    /// The path template `exchange` is an instance of, or everything in it the document
    /// does not allow.
    pub(crate) fn check(&self, exchange: &Exchange) -> Result<String, String> {
        let (template, params) = self
            .template(&exchange.path)
            .ok_or_else(|| format!("{} is under no path of the document", exchange.path))?;
        let operation = &self.doc["paths"][&template][exchange.method.to_lowercase()];
        if !operation.is_object() {
            return Err(format!("{} {template} is not documented", exchange.method));
        }
        let mut wrong = Vec::new();
        let declared = self.parameters(&template, operation);
        for (name, value) in &params {
            match declared
                .iter()
                .find(|p| p["in"] == "path" && p["name"] == *name)
            {
                Some(parameter) => wrong.extend(self.parameter(parameter, value)),
                None => wrong.push(format!("path parameter {name} is not declared")),
            }
        }
        for (name, value) in &exchange.query {
            match declared
                .iter()
                .find(|p| p["in"] == "query" && p["name"] == *name)
            {
                Some(parameter) => wrong.extend(self.parameter(parameter, value)),
                None => wrong.push(format!("query parameter {name:?} is not declared")),
            }
        }
        for required in declared
            .iter()
            .filter(|p| p["in"] == "query" && p["required"] == true)
        {
            if !exchange
                .query
                .iter()
                .any(|(name, _)| required["name"] == *name)
            {
                wrong.push(format!("query parameter {} is required", required["name"]));
            }
        }
        let request = &operation["requestBody"];
        match (request.is_object(), exchange.body.is_empty()) {
            (true, true) if request["required"] == true => {
                wrong.push("the request body is required".into());
            }
            (true, false) => wrong.extend(self.body(
                "request body",
                &request["content"]["application/json"]["schema"],
                &exchange.body,
            )),
            (false, false) => wrong.push("a request body where none is documented".into()),
            _ => {}
        }
        let responses = &operation["responses"];
        // `default` is the document's internal error: it covers a 5xx nothing else lists,
        // never an unlisted success or refusal.
        let response = responses
            .get(exchange.status.to_string())
            .or_else(|| responses.get("default").filter(|_| exchange.status >= 500))
            .map(|response| self.resolve(response));
        match response {
            None => wrong.push(format!("status {} is not documented", exchange.status)),
            Some(response) => match response["content"]["application/json"].get("schema") {
                Some(schema) => wrong.extend(self.body("answer", schema, &exchange.answer)),
                None if !exchange.answer.is_empty() => {
                    wrong.push("an answer body where none is documented".into());
                }
                None => {}
            },
        }
        if wrong.is_empty() {
            Ok(template)
        } else {
            Err(format!(
                "{} {} ({template}, answered {}): {}",
                exchange.method,
                exchange.path,
                exchange.status,
                wrong.join("; ")
            ))
        }
    }

    /// The document's path `path` is an instance of, and its path parameters' values.
    fn template(&self, path: &str) -> Option<(String, Vec<(String, String)>)> {
        let segments: Vec<&str> = path.split('/').collect();
        self.doc["paths"].as_object()?.keys().find_map(|template| {
            let parts: Vec<&str> = template.split('/').collect();
            if parts.len() != segments.len() {
                return None;
            }
            let mut params = Vec::new();
            for (part, segment) in parts.iter().zip(&segments) {
                match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                    Some(name) if !segment.is_empty() => {
                        let value = percent_encoding::percent_decode_str(segment)
                            .decode_utf8_lossy()
                            .into_owned();
                        params.push((name.to_owned(), value));
                    }
                    _ if part == segment => {}
                    _ => return None,
                }
            }
            Some((template.clone(), params))
        })
    }

    /// The parameters of `operation`: the path item's and its own.
    fn parameters(&self, template: &str, operation: &Value) -> Vec<Value> {
        let shared = &self.doc["paths"][template]["parameters"];
        [shared, &operation["parameters"]]
            .into_iter()
            .filter_map(Value::as_array)
            .flatten()
            .map(|parameter| self.resolve(parameter).clone())
            .collect()
    }

    /// What is wrong with `text` as the value of `parameter`: read as its schema's type.
    fn parameter(&self, parameter: &Value, text: &str) -> Vec<String> {
        let schema = &parameter["schema"];
        let value = match self.resolve(schema)["type"].as_str() {
            Some("integer") => text.parse::<i64>().map_or(Value::from(text), Value::from),
            Some("boolean") => text.parse::<bool>().map_or(Value::from(text), Value::from),
            _ => Value::from(text),
        };
        self.errors(schema, &value)
            .into_iter()
            .map(|error| format!("parameter {} = {text:?}: {error}", parameter["name"]))
            .collect()
    }

    /// What is wrong with `bytes` as a JSON body of `schema`.
    fn body(&self, what: &str, schema: &Value, bytes: &[u8]) -> Vec<String> {
        match serde_json::from_slice::<Value>(bytes) {
            Err(error) => vec![format!("the {what} is not JSON: {error}")],
            Ok(value) => self
                .errors(schema, &value)
                .into_iter()
                .map(|error| format!("the {what} {value}: {error}"))
                .collect(),
        }
    }

    /// `value` against `schema`, with the document's components in reach of its `$ref`s.
    fn errors(&self, schema: &Value, value: &Value) -> Vec<String> {
        let mut root = match schema {
            Value::Object(object) => object.clone(),
            other => Map::from_iter([("allOf".to_owned(), Value::Array(vec![other.clone()]))]),
        };
        root.insert("components".into(), self.doc["components"].clone());
        let validator = jsonschema::draft202012::new(&Value::Object(root))
            .unwrap_or_else(|error| panic!("a schema of docs/openapi.yaml: {error}"));
        validator
            .iter_errors(value)
            .map(|error| format!("{error} at {}", error.instance_path()))
            .collect()
    }

    /// `value`, or what its `$ref` (`#/components/...`) points at.
    fn resolve<'a>(&'a self, value: &'a Value) -> &'a Value {
        value
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| reference.strip_prefix('#'))
            .and_then(|pointer| self.doc.pointer(pointer))
            .unwrap_or(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(method: &str, path: &str, body: &str, status: u16, answer: &str) -> Exchange {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        Exchange {
            method: method.into(),
            path: path.into(),
            query: form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
            body: body.into(),
            status,
            answer: answer.into(),
        }
    }

    /// The judge can fail: each kind of departure from the document is named.
    #[test]
    fn each_departure_from_the_document_is_named() {
        let contract = Contract::load();
        let id = "3c0e4b1a-9f2d-4c57-8a61-2b7e0d9c5f10";
        let report = format!("/v1/leases/{id}/report");
        let counted = r#"{"result": "ok", "target": "shop.example", "repeated": false, "cooldownUntil": null, "cooldownSeconds": null, "leaseAgain": false}"#;
        let fine = exchange("POST", &report, r#"{"result": "ok"}"#, 200, counted);
        let checked = contract.check(&fine);
        for (bad, says) in [
            (exchange("PATCH", &report, "", 200, ""), "not documented"),
            (exchange("GET", "/v2/leases", "", 200, ""), "under no path"),
            (
                exchange(
                    "POST",
                    "/v1/leases/not-a-uuid/report",
                    r#"{"result": "ok"}"#,
                    200,
                    counted,
                ),
                "parameter \"id\"",
            ),
            (
                exchange("POST", &report, r#"{"result": "fine"}"#, 200, counted),
                "request body",
            ),
            (
                exchange(
                    "POST",
                    &report,
                    r#"{"result": "ok", "extra": 1}"#,
                    200,
                    counted,
                ),
                "request body",
            ),
            (exchange("POST", &report, "", 200, counted), "required"),
            (
                exchange("POST", &report, r#"{"result": "ok"}"#, 299, ""),
                "status 299",
            ),
            (
                exchange("POST", &report, r#"{"result": "ok"}"#, 200, "{}"),
                "answer",
            ),
            (
                exchange(
                    "DELETE",
                    "/v1/leases?holder=a&who=b",
                    "",
                    200,
                    r#"{"released": 0}"#,
                ),
                "\"who\" is not declared",
            ),
            (
                exchange("DELETE", "/v1/leases", "", 200, r#"{"released": 0}"#),
                "\"holder\" is required",
            ),
        ] {
            let error = contract
                .check(&bad)
                .expect_err(&format!("{bad:?} is refused"));
            assert!(error.contains(says), "{bad:?}: {error} (expected {says:?})");
        }
        assert_eq!(checked, Ok("/v1/leases/{id}/report".to_owned()));
    }
}
