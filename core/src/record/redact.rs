//! Redaction: keeping cloud-init content out of recordings while keeping them replayable.
//! The design and its limits are in the [module docs](super#secrets).

use std::collections::BTreeSet;

use data_encoding::HEXLOWER;
use proxy_crd::ProxySpec;
use sha2::{Digest, Sha256};

use super::canonical;
use super::schema::{DecideInput, DecideRecord, Redaction};
use crate::action::Decision;
use crate::observed::{CloudInitView, Observed};
use crate::spec_hash::{HashInput, spec_hash};
use proxy_crd::ProxyStatus;

/// Prefix of a redacted cloud-init content.
pub const REDACTED_PREFIX: &str = "sha256:";

/// What stands for `content` in a recording: `sha256:` and the lowercase hex SHA-256 of the
/// content. Equal contents give equal placeholders, so a rotated Secret still shows in a
/// diff, and nothing of the content can be read back.
pub fn placeholder(content: &str) -> String {
    format!(
        "{REDACTED_PREFIX}{}",
        HEXLOWER.encode(&Sha256::digest(content.as_bytes()))
    )
}

impl DecideRecord {
    /// The record of the call `decide(spec, status, observed) == output`, redacted
    /// ([`DecideRecord::redact`]). `seq` is 0 until [`Recording::push`](super::Recording::push)
    /// numbers it.
    pub fn new(
        spec: &ProxySpec,
        status: &ProxyStatus,
        observed: &Observed,
        output: &Decision,
    ) -> Self {
        let mut record = Self {
            seq: 0,
            object: format!("{}/{}", observed.object.namespace, observed.object.name),
            input: DecideInput {
                spec: spec.clone(),
                status: status.clone(),
                observed: observed.clone(),
            },
            output: output.clone(),
            redaction: None,
        };
        record.redact();
        record
    }

    /// Replaces the cloud-init content, which may carry credentials, by its
    /// [`placeholder`] everywhere in the record: `observed.cloudInit` when resolved,
    /// `spec.cloudInit.inline`, and every output string equal to either (the
    /// [`CreateRequest::cloud_init`](crate::CreateRequest::cloud_init) of a create). When the
    /// resolved content is replaced, the spec hash of the real input goes into
    /// [`Redaction::spec_hash`] so that replay can still reproduce the output.
    ///
    /// Idempotent: a record whose [`redaction`](DecideRecord::redaction) is set is left as it
    /// is. A record with no cloud-init content is left as it is too.
    pub fn redact(&mut self) {
        if self.redaction.is_some() {
            return;
        }
        let DecideInput { spec, observed, .. } = &mut self.input;
        let mut secrets = Vec::new();
        let mut spec_hash_of_input = None;
        if let CloudInitView::Resolved { content } = &mut observed.cloud_init {
            spec_hash_of_input = Some(machine_hash(spec, content));
            let stand_in = placeholder(content);
            secrets.push((std::mem::replace(content, stand_in.clone()), stand_in));
        }
        if let Some(inline) = spec.cloud_init.as_mut().and_then(|c| c.inline.as_mut()) {
            let stand_in = placeholder(inline);
            secrets.push((std::mem::replace(inline, stand_in.clone()), stand_in));
        }
        if secrets.is_empty() {
            return;
        }
        let mut output = serde_json::to_value(&self.output).expect("a Decision serializes");
        canonical::map_strings(&mut output, &mut |s: &str| {
            secrets
                .iter()
                .find(|(secret, _)| secret == s)
                .map(|(_, stand_in)| stand_in.clone())
        });
        self.output = serde_json::from_value(output)
            .expect("replacing strings keeps a serialized Decision deserializable");
        self.redaction = Some(Redaction {
            spec_hash: spec_hash_of_input,
        });
    }
}

/// The spec hash `decide` computes for `spec` with the resolved cloud-init `content`.
pub(super) fn machine_hash(spec: &ProxySpec, content: &str) -> String {
    spec_hash(&HashInput {
        placement: spec.placement.as_ref(),
        cloud_init: Some(content),
        port: spec.effective_port(),
    })
}

/// Runs `decide` on a redacted input so that its output is the one the real input gave,
/// redacted the same way.
///
/// `decide` hashes the cloud-init content, and the redacted input holds the placeholder, so
/// its machine hash is another value (the stand-in). The hash is only ever compared for
/// equality with the annotation, and written out by [`SetSpecHash`](crate::Action::SetSpecHash):
/// replacing the real hash by the stand-in in the annotation before the call, and the
/// stand-in by the real hash in the output after it, gives exactly the comparisons and the
/// output of the real call.
///
/// Then the output is redacted as the recorder redacted the real one, without knowing the
/// content: a string equal to the content is a string whose placeholder is one of the
/// input's placeholders. (The content itself flows through as its placeholder already.)
pub(super) fn decide_redacted<F>(
    input: &DecideInput,
    redaction: &Redaction,
    decide: &mut F,
) -> Decision
where
    F: FnMut(&ProxySpec, &ProxyStatus, &Observed) -> Decision,
{
    let DecideInput {
        spec,
        status,
        observed,
    } = input;
    let resolved = match &observed.cloud_init {
        CloudInitView::Resolved { content } => Some(content.as_str()),
        CloudInitView::NotSet | CloudInitView::Unavailable { .. } => None,
    };
    let inline = spec.cloud_init.as_ref().and_then(|c| c.inline.as_deref());
    let stand_ins: BTreeSet<&str> = [resolved, inline]
        .into_iter()
        .flatten()
        .filter(|content| content.starts_with(REDACTED_PREFIX))
        .collect();
    let mapping = match (redaction.spec_hash.as_deref(), resolved) {
        (Some(real), Some(content)) => Some((machine_hash(spec, content), real)),
        (None, _) | (_, None) => None,
    };
    let mut observed = observed.clone();
    if let Some((stand_in, real)) = &mapping
        && observed.object.spec_hash_annotation.as_deref() == Some(*real)
    {
        observed.object.spec_hash_annotation = Some(stand_in.clone());
    }
    let output = decide(spec, status, &observed);
    let mut value = serde_json::to_value(&output).expect("a Decision serializes");
    if let Some((stand_in, real)) = &mapping {
        // A SHA-256 in hex cannot occur by accident inside another string.
        canonical::replace_in_strings(&mut value, stand_in, real);
    }
    canonical::map_strings(&mut value, &mut |s: &str| {
        let stand_in = placeholder(s);
        stand_ins.contains(stand_in.as_str()).then_some(stand_in)
    });
    serde_json::from_value(value)
        .expect("replacing strings keeps a serialized Decision deserializable")
}
