//! The providers config (`--providers-config`): which providers exist, by name, and how to
//! reach each one. A Proxy's `spec.provider` names one entry.
//!
//! Loading is strict and fails at start, never later: YAML duplicates and unknown keys,
//! unknown types, duplicate or non-DNS-1123 names, a missing or mismatched type block and
//! missing required settings are all fatal, and every problem names the path of the
//! offending entry (`providers[1].gcp.project`) so it can be fixed without guessing.
//!
//! ```yaml
//! providers:
//!   - name: pods            # DNS-1123 label, unique
//!     type: kubernetes      # kubernetes | gcp | kvm (`providers::types`)
//!     kubernetes: {}        # the block named after the type, and no other
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::providers::settings::Problem;
use crate::providers::settings::is_dns1123_label;
pub use crate::providers::types::ProviderSettings;

/// A validated providers config.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvidersConfig {
    /// The providers, in file order.
    pub providers: Vec<Provider>,
}

/// One validated provider entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    /// The name Proxies refer to in `spec.provider`.
    pub name: String,
    /// Type-specific settings.
    pub settings: ProviderSettings,
}

/// Why a providers config was refused: every problem found, each with its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file that was read.
    pub file: PathBuf,
    /// The problems, in file order.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid providers config {}:", self.file.display())?;
        for Problem { path, message } in &self.problems {
            if path.is_empty() {
                write!(f, "\n  {message}")?;
            } else {
                write!(f, "\n  {path}: {message}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// The file as written, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    providers: Vec<RawProvider>,
}

/// One entry as written: its name, its type and its blocks (only the type's own block
/// belongs; [`ProviderSettings::parse`] reads it).
#[derive(Debug, Deserialize)]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "type")]
    type_: String,
    #[serde(flatten)]
    blocks: std::collections::BTreeMap<String, serde_json::Value>,
}

impl ProvidersConfig {
    /// Reads and validates `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: file.to_owned(),
            problems: vec![Problem {
                path: String::new(),
                message: format!("cannot read: {e}"),
            }],
        })?;
        Self::parse(&text).map_err(|problems| ConfigError {
            file: file.to_owned(),
            problems,
        })
    }

    /// Parses and validates the text of a providers config.
    pub fn parse(text: &str) -> Result<Self, Vec<Problem>> {
        let options = serde_saphyr::options! { strict_booleans: true };
        // YAML to a JSON value first (strict YAML: duplicate keys are errors), then to the
        // typed form through serde_path_to_error, which knows the path of a bad key.
        let value: serde_json::Value =
            serde_saphyr::from_str_with_options(text, options).map_err(|e| {
                vec![Problem {
                    path: String::new(),
                    message: format!("not valid YAML: {e}"),
                }]
            })?;
        let raw: RawConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            vec![Problem {
                path,
                message: e.into_inner().to_string(),
            }]
        })?;
        validate(raw)
    }

    /// One line for `check-config`: how many providers of which types.
    pub fn summary(&self) -> String {
        let entries: Vec<String> = self
            .providers
            .iter()
            .map(|p| format!("{} ({})", p.name, p.settings.type_name()))
            .collect();
        format!(
            "ok, {} provider(s): {}",
            self.providers.len(),
            entries.join(", ")
        )
    }

    /// The provider named `name`, if configured.
    pub fn get(&self, name: &str) -> Option<&Provider> {
        self.providers.iter().find(|p| p.name == name)
    }
}

fn validate(raw: RawConfig) -> Result<ProvidersConfig, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut problem = |path: String, message: String| problems.push(Problem { path, message });
    if raw.providers.is_empty() {
        problem(
            "providers".into(),
            "at least one provider is required".into(),
        );
    }
    let mut seen = BTreeSet::new();
    let mut providers = Vec::new();
    for (i, entry) in raw.providers.into_iter().enumerate() {
        let at = format!("providers[{i}]");
        if !is_dns1123_label(&entry.name) {
            problem(
                format!("{at}.name"),
                format!(
                    "{:?} is not a DNS-1123 label (1-63 lowercase letters, digits and '-', \
                     starting and ending with a letter or digit)",
                    entry.name
                ),
            );
        } else if !seen.insert(entry.name.clone()) {
            problem(
                format!("{at}.name"),
                format!("duplicate provider name {:?}", entry.name),
            );
        }
        let mut blocks = entry.blocks;
        let block = blocks.remove(&entry.type_);
        for key in blocks.keys() {
            let message = if ProviderSettings::NAMES.contains(&key.as_str()) {
                format!(
                    "a {key:?} block does not belong to a provider of type {:?}",
                    entry.type_
                )
            } else {
                format!(
                    "unknown field `{key}`, expected `name`, `type` or the block named after \
                     the type ({})",
                    ProviderSettings::NAMES.join(", ")
                )
            };
            problem(format!("{at}.{key}"), message);
        }
        let Some(block) = block.filter(|_| ProviderSettings::NAMES.contains(&entry.type_.as_str()))
        else {
            if ProviderSettings::NAMES.contains(&entry.type_.as_str()) {
                problem(
                    format!("{at}.{}", entry.type_),
                    format!(
                        "a provider of type {0:?} needs a {0:?} block (it may be empty: {0}: {{}})",
                        entry.type_
                    ),
                );
            } else {
                problem(
                    format!("{at}.type"),
                    format!(
                        "unknown provider type {:?} (known: {})",
                        entry.type_,
                        ProviderSettings::NAMES.join(", ")
                    ),
                );
            }
            continue;
        };
        let at = format!("{at}.{}", entry.type_);
        let settings = match ProviderSettings::parse(&entry.type_, block, &at) {
            Some(Ok(settings)) => settings,
            Some(Err(found)) => {
                for Problem { path, message } in found {
                    problem(path, message);
                }
                continue;
            }
            None => continue,
        };
        providers.push(Provider {
            name: entry.name,
            settings,
        });
    }
    if problems.is_empty() {
        Ok(ProvidersConfig { providers })
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests;
