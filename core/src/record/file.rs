//! The file: JSON Lines, header first, one record per line, canonical bytes.

use std::fmt;

use serde_json::Value;

use super::canonical;
use super::schema::{DecideRecord, Header, Record, SCHEMA};
use crate::key::ProxyKey;

/// A recording: the header and the records, in file order.
///
/// Build one with [`Recording::new`] and [`Recording::push`], write it with
/// [`Recording::to_jsonl`], read one with [`Recording::parse`]. Writing a parsed file gives
/// back the same bytes when it was written by this build: that is what makes recordings diff
/// line by line.
#[derive(Clone, Debug, PartialEq)]
pub struct Recording {
    header: Header,
    records: Vec<Record>,
}

impl Recording {
    /// An empty recording under `header`.
    pub fn new(header: Header) -> Self {
        Self {
            header,
            records: Vec::new(),
        }
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The records, in file order. Record `i` is on line `i + 2` of the file.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Appends `record` under the next sequence number (1 for the first), which it returns.
    /// A [`Record::Decide`] is redacted first ([`DecideRecord::redact`]), so a recording
    /// never holds cloud-init content, however its records were built.
    pub fn push(&mut self, mut record: Record) -> u64 {
        let seq = self.records.last().map_or(1, |last| last.seq() + 1);
        record.set_seq(seq);
        if let Record::Decide(decide) = &mut record {
            decide.redact();
        }
        self.records.push(record);
        seq
    }

    /// The file: the header and each record on its own line as canonical JSON (object keys
    /// sorted, no whitespace), each line ending in `\n`.
    ///
    /// # Errors
    ///
    /// As [`Header::to_line`] and [`Record::to_line`].
    pub fn to_jsonl(&self) -> Result<String, serde_json::Error> {
        let mut out = self.header.to_line()?;
        out.push('\n');
        for record in &self.records {
            out.push_str(&record.to_line()?);
            out.push('\n');
        }
        Ok(out)
    }

    /// Reads a recording.
    ///
    /// Line 1 must be a header with a `schema` this build reads ([`SCHEMA`]); the schema is
    /// checked before anything else, so a file of another schema is reported as such rather
    /// than as a pile of unknown fields. Every other line is one record, with a sequence
    /// number above the previous one. Blank lines are errors (line numbers must stay the
    /// ones of the file); a final newline is not.
    ///
    /// # Errors
    ///
    /// [`ReplayError::UnsupportedSchema`] for another schema, [`ReplayError::Malformed`],
    /// naming the line, for anything else.
    pub fn parse(text: &str) -> Result<Self, ReplayError> {
        let text = text.strip_suffix('\n').unwrap_or(text);
        let mut lines = text.split('\n').enumerate().map(|(i, line)| (i + 1, line));
        let (_, first) = lines.next().unwrap_or((1, ""));
        let header = parse_header(first)?;
        let mut records: Vec<Record> = Vec::new();
        for (number, line) in lines {
            let malformed = |message: String| ReplayError::Malformed {
                line: number,
                message,
            };
            let value = json(number, line)?;
            match value.get("kind").and_then(Value::as_str) {
                Some("header") => {
                    return Err(malformed("a header may only be the first line".to_owned()));
                }
                None => {
                    return Err(malformed(
                        "a record needs a string `kind` (\"decide\" or \"health\")".to_owned(),
                    ));
                }
                Some(_) => {}
            }
            let record: Record =
                serde_json::from_value(value).map_err(|e| malformed(e.to_string()))?;
            check(&record).map_err(malformed)?;
            if let Some(previous) = records.last().map(Record::seq)
                && record.seq() <= previous
            {
                return Err(malformed(format!(
                    "seq {} does not follow seq {previous}: records must be in recording order",
                    record.seq()
                )));
            }
            records.push(record);
        }
        Ok(Self { header, records })
    }
}

fn json(number: usize, line: &str) -> Result<Value, ReplayError> {
    if line.trim().is_empty() {
        return Err(ReplayError::Malformed {
            line: number,
            message: "empty line".to_owned(),
        });
    }
    serde_json::from_str(line).map_err(|e| ReplayError::Malformed {
        line: number,
        message: format!("not JSON (column {}): {}", e.column(), bare(&e)),
    })
}

/// serde_json's message without its " at line L column C" suffix: each line of the file is
/// one JSON document, so its own line number would always read "line 1".
fn bare(error: &serde_json::Error) -> String {
    let message = error.to_string();
    match message.rsplit_once(" at line ") {
        Some((bare, _)) => bare.to_owned(),
        None => message,
    }
}

fn parse_header(line: &str) -> Result<Header, ReplayError> {
    let malformed = |message: String| ReplayError::Malformed { line: 1, message };
    if line.trim().is_empty() {
        return Err(malformed(
            "line 1 is empty: a recording starts with its header".to_owned(),
        ));
    }
    let mut value = json(1, line)?;
    let Value::Object(map) = &mut value else {
        return Err(malformed("line 1 must be the header object".to_owned()));
    };
    match map.remove("kind") {
        Some(Value::String(kind)) if kind == "header" => {}
        Some(other) => {
            return Err(malformed(format!(
                "line 1 must be the header (kind \"header\"), found kind {other}"
            )));
        }
        None => {
            return Err(malformed(
                "line 1 must be the header: it has no `kind`".to_owned(),
            ));
        }
    }
    let found = map.get("schema").cloned();
    match found.as_ref().and_then(Value::as_u64) {
        Some(schema) if schema == u64::from(SCHEMA) => {}
        // Schema 2 adds its migration from 1 here, as a function from a schema-1 record's
        // JSON to a schema-2 one, so old incident files keep replaying.
        Some(schema) => {
            let operator = |field: &str| {
                map.get("operator")
                    .and_then(|o| o.get(field))
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_owned()
            };
            return Err(ReplayError::UnsupportedSchema {
                found: schema,
                version: operator("version"),
                commit: operator("commit"),
            });
        }
        None => {
            return Err(malformed(format!(
                "the header needs an integer `schema`, found {}",
                found.map_or_else(|| "none".to_owned(), |v| v.to_string())
            )));
        }
    }
    serde_json::from_value(value).map_err(|e| malformed(format!("header: {e}")))
}

/// What the serde derives cannot check: the redundant `object` matches the input.
fn check(record: &Record) -> Result<(), String> {
    match record {
        Record::Decide(record) => {
            let DecideRecord { object, input, .. } = &**record;
            let meta = &input.observed.object;
            let expected = ProxyKey::new(&meta.namespace, &meta.name);
            if *object != expected {
                return Err(format!(
                    "object \"{object}\" is not the input's object \"{expected}\""
                ));
            }
        }
        // Its object parsed as a `ProxyKey`, and nothing else in it names the proxy.
        Record::Health(_) => {}
        Record::Pool(record) => {
            if record.object.name() != record.input.observed.name {
                return Err(format!(
                    "object \"{}\" is not the pool \"{}\" of its input",
                    record.object, record.input.observed.name
                ));
            }
        }
    }
    Ok(())
}

/// Why a recording could not be read or replayed. A divergence is not an error: it is the
/// answer ([`ReplayReport::divergence`](super::ReplayReport::divergence)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// A line is not what schema [`SCHEMA`] says.
    Malformed {
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The header names a schema this build does not read.
    UnsupportedSchema {
        /// The schema in the header.
        found: u64,
        /// The operator version in the header, or `unknown`.
        version: String,
        /// The operator commit in the header, or `unknown`.
        commit: String,
    },
    /// A record is well-formed but cannot be replayed: the health state it starts from is
    /// one the [`HealthBook`](crate::health::HealthBook) cannot reach.
    Unreproducible {
        /// The line, from 1.
        line: usize,
        /// The record's sequence number.
        seq: u64,
        /// Why.
        message: String,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { line, message } => write!(f, "line {line}: {message}"),
            Self::UnsupportedSchema {
                found,
                version,
                commit,
            } => write!(
                f,
                "line 1: recording schema {found} is not supported: this build reads schema \
                 {SCHEMA} only; the file was written by operator {version} (commit {commit}), \
                 replay it with that version"
            ),
            Self::Unreproducible { line, seq, message } => {
                write!(f, "line {line} (seq {seq}): cannot replay: {message}")
            }
        }
    }
}

impl std::error::Error for ReplayError {}

impl Header {
    /// The header as the first line of a file: canonical JSON, without the newline.
    ///
    /// # Errors
    ///
    /// When serde cannot serialize a value (it can for no header this build makes).
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        let mut header = serde_json::to_value(self)?;
        if let Value::Object(map) = &mut header {
            map.insert("kind".to_owned(), Value::String("header".to_owned()));
        }
        Ok(canonical::compact(&header))
    }
}

impl Record {
    /// The record as one line of a file: canonical JSON, without the newline. A recorder that
    /// appends to a file writes these after [`Header::to_line`], with increasing `seq`.
    ///
    /// # Errors
    ///
    /// When serde cannot serialize a value of the record. A recorder logs and drops such a
    /// record: recording never stops the call it records.
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        Ok(canonical::compact(&serde_json::to_value(self)?))
    }
}
