//! The record of one [`decide_pool`] call, and its replay.
//!
//! A pool's template may hold inline cloud-init, which is a secret like a Proxy's: the record
//! replaces it by its [`placeholder`](crate::digest::placeholder) in the input's template and in the output's creates.
//! The template hash covers the placeholder of the content, not the content
//! ([`template_hash`](crate::pool::spread::template_hash)), so a redacted input gives the
//! same hashes and replays to the same output.

use proxy_crd::{CloudInit, ProxyPoolSpec, ProxyPoolStatus, ProxySpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::digest::digest_of_content;
use crate::key::PoolKey;
use crate::pool::{PoolAction, PoolDecision, PoolObserved, decide_pool};

/// One call of [`decide_pool`]: its whole input and its output, redacted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolRecord {
    /// Position in the file, set by [`Recording::push`](super::Recording::push).
    pub seq: u64,
    /// The pool, `namespace/name`.
    pub object: PoolKey,
    /// The arguments of the call.
    pub input: PoolInput,
    /// What the call returned.
    pub output: PoolDecision,
}

/// The arguments of one [`decide_pool`] call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolInput {
    /// The pool's spec.
    pub spec: ProxyPoolSpec,
    /// The pool's status as read.
    pub status: ProxyPoolStatus,
    /// What the shell observed, with `now`.
    pub observed: PoolObserved,
}

impl PoolRecord {
    /// The record of `decide_pool(spec, status, observed) == output` for the pool `object`,
    /// with inline cloud-init replaced by its placeholder. `seq` is 0 until
    /// [`Recording::push`](super::Recording::push) numbers it.
    pub fn new(
        object: PoolKey,
        spec: &ProxyPoolSpec,
        status: &ProxyPoolStatus,
        observed: &PoolObserved,
        output: &PoolDecision,
    ) -> Self {
        let mut input = PoolInput {
            spec: spec.clone(),
            status: status.clone(),
            observed: observed.clone(),
        };
        redact_spec(&mut input.spec.template.spec);
        let mut output = output.clone();
        redact_output(&mut output);
        Self {
            seq: 0,
            object,
            input,
            output,
        }
    }

    /// Re-runs the call on the recorded input: the recorded and the replayed output, as JSON.
    pub(super) fn replay(&self) -> Result<(Value, Value), String> {
        let input = &self.input;
        let mut replayed = decide_pool(&input.spec, &input.status, &input.observed);
        redact_output(&mut replayed);
        let recorded = serde_json::to_value(&self.output).map_err(|e| e.to_string())?;
        let replayed = serde_json::to_value(&replayed).map_err(|e| e.to_string())?;
        Ok((recorded, replayed))
    }
}

fn redact_spec(spec: &mut ProxySpec) {
    if let Some(CloudInit {
        inline: Some(content),
        ..
    }) = spec.cloud_init.as_mut()
    {
        *content = digest_of_content(content);
    }
}

fn redact_output(output: &mut PoolDecision) {
    for action in &mut output.actions {
        if let PoolAction::Create { spec, .. } = action {
            redact_spec(spec);
        }
    }
}
