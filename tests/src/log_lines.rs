//! Whether the operator's JSON log lines are what a log pipeline can read: each line one
//! JSON value, each object in it with one value per key.
//!
//! `serde_json::Value` keeps the last of two values of a key without a word, as most log
//! pipelines do: a line with two `message` keys reads as valid there and loses one of them.
//! So each line is read here by a visitor that refuses a key it has seen in the same object.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value whose every object has each key once (reading one fails otherwise).
struct Unique;

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("the key {key:?} comes twice")));
            }
            map.next_value::<Unique>()?;
        }
        Ok(Unique)
    }
}

/// Why `line` is not one JSON value with each key once per object, if it is not.
pub fn problem(line: &str) -> Option<String> {
    serde_json::from_str::<Unique>(line)
        .err()
        .map(|error| error.to_string())
}

/// The lines of `log` that start a JSON object and are not one with each key once, each
/// with why (at most `limit` of them).
pub fn bad_json_lines(log: &str, limit: usize) -> Vec<String> {
    log.lines()
        .filter(|line| line.starts_with('{'))
        .filter_map(|line| problem(line).map(|why| format!("{why}: {line}")))
        .take(limit)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_comes_twice_anywhere_is_a_problem() {
        let good = r#"{"fields":{"message":"a","error":"b"},"spans":[{"name":"x"},{"name":"y"}]}"#;
        assert_eq!(problem(good), None);
        for bad in [
            r#"{"fields":{"message":"provider call failed","message":"HTTP 503"}}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"spans":[{"name":"x","name":"y"}]}"#,
            r#"{"fields":{"message":"cut"#,
        ] {
            assert!(problem(bad).is_some(), "{bad}");
        }
        let log = format!("not json\n{good}\n{{\"a\":1,\"a\":2}}\n");
        let bad = bad_json_lines(&log, 10);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].contains("the key \"a\" comes twice"), "{bad:?}");
    }
}
