//! Redaction: keeping cloud-init content out of recordings while keeping them replayable.
//! The design and its limits are in the [module docs](super#secrets).
//!
//! Redaction is by type: the fields that carry cloud-init content are named here, one
//! function each, and nothing else is touched. A string elsewhere in a record that happens
//! to equal the content (a phase, a reason, the provider's name) is not the content, and
//! stays what it is.

use std::collections::BTreeSet;

use proxy_crd::{ProxySpec, ProxyStatus};

use super::schema::{DecideInput, DecideRecord, Redaction};
use crate::action::Decision;
use crate::digest::placeholder;
use crate::key::ProxyKey;
use crate::observed::{CloudInitView, Observed};
use crate::reconcile::Decided;
use crate::spec_hash::{HashInput, spec_hash};

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
            object: ProxyKey::new(&observed.object.namespace, &observed.object.name),
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

    /// The record of one `decide` call of the driver ([`Decided`]), redacted.
    pub fn of(decided: Decided<'_>) -> Self {
        Self::new(
            decided.spec,
            decided.status,
            decided.observed,
            decided.decision,
        )
    }

    /// Replaces the cloud-init content, which may carry credentials, by its
    /// [`placeholder`](crate::digest::placeholder) in the fields that carry it, and only there: `spec.cloudInit.inline`,
    /// `observed.cloudInit` when resolved, and the user data of each create in the output
    /// ([`CreateRequest::cloud_init`](crate::CreateRequest::cloud_init)). No other field of a
    /// record holds cloud-init content: `decide` copies it into a create request and nowhere
    /// else. When the resolved content is replaced, the spec hash of the real input goes into
    /// [`Redaction::spec_hash`] so that replay can still reproduce the output.
    ///
    /// Never fails, whatever the content: nothing is serialised or parsed.
    ///
    /// Idempotent: a record whose [`redaction`](DecideRecord::redaction) is set is left as it
    /// is. A record with no cloud-init content is left as it is too.
    pub fn redact(&mut self) {
        if self.redaction.is_some() {
            return;
        }
        let DecideInput { spec, observed, .. } = &mut self.input;
        let spec_hash = resolved(observed).map(|content| machine_hash(spec, content));
        let carried: Vec<&mut String> = inline_mut(spec)
            .into_iter()
            .chain(resolved_mut(observed))
            .chain(self.output.cloud_init_mut())
            .collect();
        if carried.is_empty() {
            return;
        }
        for content in carried {
            *content = placeholder(content);
        }
        self.redaction = Some(Redaction { spec_hash });
    }
}

/// `spec.cloudInit.inline`.
fn inline(spec: &ProxySpec) -> Option<&str> {
    spec.cloud_init.as_ref()?.inline.as_deref()
}

fn inline_mut(spec: &mut ProxySpec) -> Option<&mut String> {
    spec.cloud_init.as_mut()?.inline.as_mut()
}

/// The resolved content of `observed.cloudInit`.
fn resolved(observed: &Observed) -> Option<&str> {
    match &observed.cloud_init {
        CloudInitView::Resolved { content } => Some(content),
        CloudInitView::NotSet | CloudInitView::Unavailable { .. } => None,
    }
}

fn resolved_mut(observed: &mut Observed) -> Option<&mut String> {
    match &mut observed.cloud_init {
        CloudInitView::Resolved { content } => Some(content),
        CloudInitView::NotSet | CloudInitView::Unavailable { .. } => None,
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
/// equality with the annotation, and written out by [`SetSpecHash`](crate::MetadataWrite::SetSpecHash):
/// replacing the real hash by the stand-in in the annotation before the call, and the
/// stand-in by the real hash in the hashes the output writes after it, gives exactly the
/// comparisons and the output of the real call.
///
/// Then the output is redacted as the recorder redacted the real one, by type: the user data
/// of a create that is one of the input's placeholders came from the redacted input, where
/// the real call had the content, and is left as it is; any other (a changed rule's) is
/// replaced by its placeholder, as the recorder would have.
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
    let stand_ins: BTreeSet<&str> = inline(spec).into_iter().chain(resolved(observed)).collect();
    let mapping = match (redaction.spec_hash.as_deref(), resolved(observed)) {
        (Some(real), Some(content)) => Some((machine_hash(spec, content), real)),
        (None, _) | (_, None) => None,
    };
    let mut observed = observed.clone();
    if let Some((stand_in, real)) = &mapping
        && observed.object.spec_hash_annotation.as_deref() == Some(*real)
    {
        observed.object.spec_hash_annotation = Some(stand_in.clone());
    }
    let mut output = decide(spec, status, &observed);
    if let Some((stand_in, real)) = &mapping {
        for hash in output.spec_hashes_mut().filter(|hash| *hash == stand_in) {
            *hash = (*real).to_owned();
        }
    }
    if let Some(content) = output.cloud_init_mut()
        && !stand_ins.contains(content.as_str())
    {
        *content = placeholder(content);
    }
    output
}
