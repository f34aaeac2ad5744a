//! The timeline: one short line per record, for whoever is on call.

use std::time::Duration;

use proxy_crd::Mode;

use super::file::Recording;
use super::pool::PoolRecord;
use super::redact;
use super::schema::{DecideRecord, Header, HealthRecord, Record};
use crate::action::{Action, Requeue};
use crate::observed::{CloudInitView, InstanceView, Outcome, ProviderCall};
use crate::pool::PoolAction;
use crate::spec_hash::{HashInput, spec_hash};

/// The recording as lines for humans: a line about the header, then one line per record
/// ([`Record::summary`]).
pub fn timeline(recording: &Recording) -> Vec<String> {
    std::iter::once(header_line(recording.header()))
        .chain(recording.records().iter().map(Record::summary))
        .collect()
}

fn header_line(header: &Header) -> String {
    let timing = &header.config.timing;
    let providers: Vec<&str> = header.config.providers.iter().map(String::as_str).collect();
    format!(
        "recorded {} by operator {} (commit {}), schema {}; providers: {}; polls: provisioning \
         {}, drift {}, deletion {}, soon {}, quota retry {}",
        header.recorded_at,
        header.operator.version,
        header.operator.commit,
        header.schema,
        if providers.is_empty() {
            "none".to_owned()
        } else {
            providers.join(", ")
        },
        friendly(timing.provisioning_poll),
        friendly(timing.drift_poll),
        friendly(timing.deletion_poll),
        friendly(timing.requeue_soon),
        friendly(timing.quota_retry),
    )
}

impl Record {
    /// One line: when, which object, what was observed, what was decided. For example
    /// `2026-11-30T12:00:01Z crawl/p1  observed: instance Running 10.0.0.7, hash matches
    /// decided: PatchStatus(Ready), Event Created  requeue 1m`.
    pub fn summary(&self) -> String {
        let (observed, decided) = match self {
            Self::Decide(record) => (observed(record), decided(record)),
            Self::Health(record) => health(record),
            Self::Pool(record) => pool(record),
        };
        format!(
            "{} {}  {}: {observed}  {decided}",
            self.at(),
            self.object(),
            match self {
                Self::Decide(_) => "observed",
                Self::Health(_) => "probe",
                Self::Pool(_) => "pool",
            }
        )
    }
}

/// A pool decision in one line: what it saw, and what it did.
fn pool(record: &PoolRecord) -> (String, String) {
    let observed = &record.input.observed;
    let seen = format!(
        "{} proxies, desired {}",
        observed.members.len(),
        record.output.status.desired_replicas
    );
    let did: Vec<String> = record
        .output
        .actions
        .iter()
        .map(|action| match action {
            PoolAction::Create { name, .. } => format!("create {name}"),
            PoolAction::Update { name, .. } => format!("update {name}"),
            PoolAction::Drain { name, why, .. } => format!("drain {name} ({})", why.describe()),
            PoolAction::Undrain { name, .. } => format!("undrain {name}"),
            PoolAction::Delete { name } => format!("delete {name}"),
        })
        .collect();
    let did = if did.is_empty() {
        "nothing to do".to_owned()
    } else {
        did.join(", ")
    };
    (seen, did)
}

fn observed(record: &DecideRecord) -> String {
    let spec = &record.input.spec;
    let status = &record.input.status;
    let observed = &record.input.observed;
    let mut parts = Vec::new();
    if observed.object.deletion_requested {
        parts.push("deletion requested".to_owned());
    }
    if !observed.object.has_finalizer {
        parts.push("no finalizer".to_owned());
    }
    if spec.mode == Mode::External {
        parts.push("external".to_owned());
    } else if !observed.provider_configured {
        parts.push("provider not configured".to_owned());
    }
    match &observed.outcome {
        Some(outcome) => parts.push(match outcome {
            Outcome::Created { provider_id } => format!("create succeeded: {provider_id}"),
            Outcome::Deleted => "delete succeeded".to_owned(),
            Outcome::Failed { call, error } => format!(
                "{} failed ({:?}): {}",
                match call {
                    ProviderCall::Create => "create",
                    ProviderCall::Delete => "delete",
                },
                error.class,
                error.message
            ),
        }),
        None if spec.mode == Mode::Managed => {
            parts.push(instance(&observed.instance, status.provider_id.is_some()));
            if let Some(hash) = hash_state(record).filter(|_| !observed.object.deletion_requested) {
                parts.push(hash.to_owned());
            }
        }
        None => {}
    }
    if let Some(verdict) = &observed.health {
        parts.push(format!(
            "{} {} ms at {}",
            if verdict.healthy {
                "healthy"
            } else {
                "unhealthy"
            },
            verdict.latency_ms,
            verdict.host
        ));
    }
    parts.join(", ")
}

fn instance(view: &InstanceView, has_provider_id: bool) -> String {
    match view {
        InstanceView::NotLookedUp if !has_provider_id => "no instance".to_owned(),
        InstanceView::NotLookedUp => "instance not looked up".to_owned(),
        InstanceView::Provisioning => "instance Provisioning".to_owned(),
        InstanceView::Running { ip } => format!("instance Running {ip}"),
        InstanceView::Stopped => "instance Stopped".to_owned(),
        InstanceView::Terminated => "instance Terminated".to_owned(),
        InstanceView::NotFound => "instance NotFound".to_owned(),
        InstanceView::CreateFailed(error) => {
            format!(
                "instance NotFound: its creation failed ({:?}): {}",
                error.class, error.message
            )
        }
        InstanceView::Error(error) => {
            format!(
                "instance lookup failed ({:?}): {}",
                error.class, error.message
            )
        }
    }
}

/// How the hash annotation compares with the spec, when it matters: for an instance.
fn hash_state(record: &DecideRecord) -> Option<&'static str> {
    let input = &record.input;
    input.status.provider_id.as_ref()?;
    let expected = match &input.observed.cloud_init {
        CloudInitView::Unavailable { .. } => return Some("cloud-init unavailable"),
        CloudInitView::Resolved { content } => record
            .redaction
            .as_ref()
            .and_then(|r| r.spec_hash.clone())
            .unwrap_or_else(|| redact::machine_hash(&input.spec, content)),
        CloudInitView::NotSet => spec_hash(&HashInput {
            placement: input.spec.placement.as_ref(),
            cloud_init: None,
            port: input.spec.effective_port(),
        }),
    };
    Some(
        match input.observed.object.spec_hash_annotation.as_deref() {
            None | Some("") => "no hash annotation",
            Some(annotation) if annotation == expected => "hash matches",
            Some(_) => "hash differs",
        },
    )
}

fn decided(record: &DecideRecord) -> String {
    let output = &record.output;
    let actions: Vec<String> = output
        .actions()
        .iter()
        .map(|action| match action {
            Action::AddFinalizer => "AddFinalizer".to_owned(),
            Action::RemoveFinalizer => "RemoveFinalizer".to_owned(),
            Action::SetSpecHash { hash } => {
                format!("SetSpecHash {}", hash.get(..12).unwrap_or(hash))
            }
            Action::IssueCredentials { secret } => format!("IssueCredentials {secret}"),
            Action::RevokeCredentials { secret } => format!("RevokeCredentials {secret}"),
            Action::SetLabels { labels } => {
                let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("SetLabels {}", labels.join(","))
            }
            Action::Create(request) => format!("Create {}", request.instance_name),
            Action::Delete { provider_id, .. } => format!("Delete {provider_id}"),
            Action::PatchStatus(status) => match status.phase {
                Some(phase) => format!("PatchStatus({phase:?})"),
                None => "PatchStatus".to_owned(),
            },
            Action::Event(event) => format!("Event {}", event.reason),
        })
        .collect();
    let actions = if actions.is_empty() {
        "nothing".to_owned()
    } else {
        actions.join(", ")
    };
    let requeue = match output.requeue() {
        Requeue::After(after) => format!("requeue {}", friendly(after)),
        Requeue::Backoff => "requeue with backoff".to_owned(),
        Requeue::AwaitChange => "await change".to_owned(),
        Requeue::Held(left) => format!("held {}", friendly(left)),
    };
    format!("decided: {actions}  {requeue}")
}

fn health(record: &HealthRecord) -> (String, String) {
    let input = &record.input;
    let probe = format!(
        "{} {} ms at {}",
        if input.probe.ok { "ok" } else { "failed" },
        input.probe.latency_ms,
        input.target.host
    );
    let state = &record.output.state;
    let verdict = match state.verdict {
        Some(true) => "healthy",
        Some(false) => "unhealthy",
        None => "no verdict",
    };
    let report = match &record.output.report {
        Some(report) => format!(
            "report {:?}: {}",
            report.reason,
            if report.verdict.healthy {
                "healthy"
            } else {
                "unhealthy"
            }
        ),
        None => "no report".to_owned(),
    };
    let run = match (state.successes, state.failures) {
        (0, failed) => format!("{failed} failed"),
        (ok, _) => format!("{ok} ok"),
    };
    (
        probe,
        format!(
            "health: {verdict}, {run} in a row (thresholds: {} failed, {} ok)  {report}",
            input.thresholds.failure_threshold, input.thresholds.success_threshold
        ),
    )
}

fn friendly(duration: Duration) -> String {
    jiff::fmt::friendly::SpanPrinter::new().unsigned_duration_to_string(&duration)
}
