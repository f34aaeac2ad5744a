//! The subset of GCE's list filter (AIP-160) a provider sends to find its instances by label:
//! `labels.k = v`, `labels.k:*` (the label is set), and terms in parentheses, which GCE ANDs:
//! `(labels.a = x) (labels.b:*)`. Values may be double-quoted. Anything else is an error,
//! which the API answers with GCE's 400, so a provider that builds a filter GCE would reject
//! fails here too instead of silently listing everything.

use std::collections::BTreeMap;

/// One label condition.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    /// `labels.key = value`
    Equals(String, String),
    /// `labels.key:*`
    Present(String),
}

/// A parsed filter: every term must hold. No terms match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Filter(Vec<Term>);

impl Filter {
    /// Parses `text`; an empty filter matches every instance.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self::default());
        }
        if !text.starts_with('(') {
            return Ok(Self(vec![term(text)?]));
        }
        let mut terms = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.strip_prefix('(') {
            let (inner, after) = open
                .split_once(')')
                .ok_or_else(|| format!("unbalanced parentheses in '{text}'"))?;
            terms.push(term(inner)?);
            rest = after.trim_start();
        }
        if !rest.is_empty() {
            return Err(format!("unexpected '{rest}'"));
        }
        Ok(Self(terms))
    }

    /// Whether an instance with `labels` passes.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|term| match term {
            Term::Equals(key, value) => labels.get(key) == Some(value),
            Term::Present(key) => labels.contains_key(key),
        })
    }
}

fn term(text: &str) -> Result<Term, String> {
    let text = text.trim();
    if let Some(field) = text.strip_suffix(":*") {
        return Ok(Term::Present(label_key(field)?));
    }
    let (field, value) = text
        .split_once('=')
        .ok_or_else(|| format!("no operator in '{text}'"))?;
    let value = value.trim();
    let value = match value.strip_prefix('"') {
        Some(quoted) => quoted
            .strip_suffix('"')
            .ok_or_else(|| format!("unterminated quote in '{text}'"))?,
        None => value,
    };
    if value.is_empty() || value.contains(char::is_whitespace) || value.starts_with('=') {
        return Err(format!("bad value in '{text}'"));
    }
    Ok(Term::Equals(label_key(field)?, value.to_owned()))
}

fn label_key(field: &str) -> Result<String, String> {
    let key = field
        .trim()
        .strip_prefix("labels.")
        .ok_or_else(|| format!("only label fields are supported, not '{}'", field.trim()))?;
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
    {
        return Err(format!("bad label key '{key}'"));
    }
    Ok(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn terms_and_conjunctions_match_like_gce() {
        let ours = labels(&[("managed", "true"), ("installation", "a1")]);
        let theirs = labels(&[("managed", "true"), ("installation", "b2")]);
        let cases = [
            ("", true, true),
            ("labels.managed = true", true, true),
            ("labels.installation=a1", true, false),
            ("labels.installation = \"b2\"", false, true),
            ("labels.installation:*", true, true),
            ("labels.owner:*", false, false),
            (
                "(labels.managed = true) (labels.installation = a1)",
                true,
                false,
            ),
            ("(labels.managed = true)(labels.installation:*)", true, true),
            (
                "(labels.managed = false) (labels.installation = a1)",
                false,
                false,
            ),
        ];
        for (text, want_ours, want_theirs) in cases {
            let filter = Filter::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(filter.matches(&ours), want_ours, "{text} on ours");
            assert_eq!(filter.matches(&theirs), want_theirs, "{text} on theirs");
        }
    }

    #[test]
    fn malformed_filters_are_rejected() {
        for text in [
            "labels.a == b",
            "labels.a =",
            "(labels.a = b",
            "(labels.a = b) junk",
            "name = px-1",
            "labels.a = b c",
            "labels. = b",
            "labels.a = \"b",
        ] {
            assert!(Filter::parse(text).is_err(), "{text} parsed");
        }
    }
}
