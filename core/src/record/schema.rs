//! The types of one recording, schema 1: what each line of the file holds.
//!
//! Every record type denies unknown fields: a field this build does not know means the file
//! was written by another schema, and silently dropping it would replay something else than
//! what was recorded. The core types the records embed ([`ProxySpec`], [`Observed`],
//! [`Decision`], ...) are the very types the core takes and returns, serialized with their own
//! serde derives, so the log holds exactly the inputs and outputs of each call.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use proxy_crd::{HealthCheck, ProxySpec, ProxyStatus};
use serde::{Deserialize, Serialize};

use super::pool::PoolRecord;
use crate::action::Decision;
use crate::health::{
    HealthBook, LATENCY_FLOOR_MS, LATENCY_REPORT_INTERVAL, Probe, ProxyHealth, Report,
    ReportReason, Target, Thresholds,
};
use crate::key::{ObjectKey, ProxyKey};
use crate::observed::{HealthVerdict, Observed, Timing};
use crate::probe_failure::ProbeFailure;

/// The schema this build writes and reads.
pub const SCHEMA: u32 = 1;

/// Line 1 of a recording: who recorded it, and the configuration that shaped its decisions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Header {
    /// The schema of the records that follow: [`SCHEMA`] for a file this build writes.
    pub schema: u32,
    /// The operator build that recorded the file.
    pub operator: Operator,
    /// The configuration that affects decisions.
    pub config: Config,
    /// When the recording was written (the shell's clock; replay never reads it).
    pub recorded_at: Timestamp,
}

impl Header {
    /// A schema-[`SCHEMA`] header for a recording by `operator` under `config`, written at
    /// `recorded_at`.
    pub fn new(operator: Operator, config: Config, recorded_at: Timestamp) -> Self {
        Self {
            schema: SCHEMA,
            operator,
            config,
            recorded_at,
        }
    }
}

/// An operator build: the same commit and the same log give the same outputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Operator {
    /// The operator's version (`CARGO_PKG_VERSION` of the binary).
    pub version: String,
    /// The git commit the binary was built from.
    pub commit: String,
}

/// The configuration that affects decisions.
///
/// Most of it is also in each record's input (the timing and whether the provider is
/// configured are in every [`Observed`]); it is repeated here so that a reader sees it once,
/// at the top. The health constants are not inputs of any call: they are compiled in, so
/// they are recorded here and [`replay`](super::replay) says when this build's differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The timing policy the reconciler ran with.
    pub timing: Timing,
    /// The names of the configured providers.
    pub providers: BTreeSet<String>,
    /// [`LATENCY_FLOOR_MS`] of the recording build.
    pub latency_floor_ms: u32,
    /// [`LATENCY_REPORT_INTERVAL`] of the recording build.
    #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
    pub latency_report_interval: Duration,
}

impl Config {
    /// The configuration of this build, with the given timing and providers.
    pub fn new(timing: Timing, providers: impl IntoIterator<Item = String>) -> Self {
        Self {
            timing,
            providers: providers.into_iter().collect(),
            latency_floor_ms: LATENCY_FLOOR_MS,
            latency_report_interval: LATENCY_REPORT_INTERVAL,
        }
    }
}

/// One core call, as one line after the header.
///
/// Serialized with a `kind` tag: `"decide"`, `"health"` or `"pool"`. Build one with `From`. The
/// variants are boxed so that a `Vec<Record>` does not reserve the largest record's size for
/// every entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Record {
    /// A call of [`decide`](fn@crate::decide).
    Decide(Box<DecideRecord>),
    /// A call of [`HealthBook::record`].
    Health(Box<HealthRecord>),
    /// A call of [`decide_pool`](crate::pool::decide_pool).
    Pool(Box<PoolRecord>),
}

impl From<PoolRecord> for Record {
    fn from(record: PoolRecord) -> Self {
        Self::Pool(Box::new(record))
    }
}

impl From<DecideRecord> for Record {
    fn from(record: DecideRecord) -> Self {
        Self::Decide(Box::new(record))
    }
}

impl From<HealthRecord> for Record {
    fn from(record: HealthRecord) -> Self {
        Self::Health(Box::new(record))
    }
}

impl Record {
    /// The record's sequence number: strictly increasing through a file.
    pub fn seq(&self) -> u64 {
        match self {
            Self::Decide(record) => record.seq,
            Self::Health(record) => record.seq,
            Self::Pool(record) => record.seq,
        }
    }

    /// The object the call was about, whatever its kind (a proxy, or a pool).
    pub fn object(&self) -> ObjectKey {
        match self {
            Self::Decide(record) => record.object.to_object(),
            Self::Health(record) => record.object.to_object(),
            Self::Pool(record) => record.object.to_object(),
        }
    }

    /// The time of the call: the observation's `now`, or when the probe ran.
    pub fn at(&self) -> Timestamp {
        match self {
            Self::Decide(record) => record.input.observed.now,
            Self::Health(record) => record.input.probe.at,
            Self::Pool(record) => record.input.observed.now,
        }
    }

    /// `"decide"` or `"health"`, as in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Decide(_) => "decide",
            Self::Health(_) => "health",
            Self::Pool(_) => "pool",
        }
    }

    /// Numbers the record: a recorder gives each record of a file the next number.
    pub fn set_seq(&mut self, seq: u64) {
        match self {
            Self::Decide(record) => record.seq = seq,
            Self::Health(record) => record.seq = seq,
            Self::Pool(record) => record.seq = seq,
        }
    }
}

/// One call of [`decide`](fn@crate::decide): its whole input and its output.
///
/// Build it with [`DecideRecord::new`], which redacts the cloud-init content (see the
/// [module docs](super#secrets)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecideRecord {
    /// Position in the file, set by [`Recording::push`](super::Recording::push).
    pub seq: u64,
    /// The object, from the input's metadata, written `namespace/name` (for grep).
    pub object: ProxyKey,
    /// The arguments of the call.
    pub input: DecideInput,
    /// What the call returned (with the cloud-init content redacted).
    pub output: Decision,
    /// Set when secrets were redacted from the input: what replay needs to reproduce the
    /// output anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction: Option<Redaction>,
}

/// The arguments of one [`decide`](fn@crate::decide) call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecideInput {
    /// `spec`.
    pub spec: ProxySpec,
    /// `status`: as read, or the first decision's status on the second call of a reconcile.
    pub status: ProxyStatus,
    /// `observed`, with `now` and everything else nondeterministic.
    pub observed: Observed,
}

/// What was redacted from a [`DecideRecord`], and what replay needs to reproduce its output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Redaction {
    /// The spec hash of the real input, when resolved cloud-init content was redacted. It is
    /// the value the spec hash annotation holds on the object, so it reveals nothing the
    /// object does not. `None` when only `spec.cloudInit.inline` was redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
}

/// One call of [`HealthBook::record`]: the probe result, and the book's state for that
/// proxy before and after.
///
/// The book's state is part of the input because the call depends on it (the counters, the
/// verdict, the verdict last delivered), and recording it per call keeps every record
/// replayable on its own, whatever the recording window cut off before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthRecord {
    /// Position in the file, set by [`Recording::push`](super::Recording::push).
    pub seq: u64,
    /// The proxy's key, written `namespace/name`.
    pub object: ProxyKey,
    /// The arguments of the call, and the book's state for this proxy before it.
    pub input: HealthInput,
    /// The report it returned, and the book's state for this proxy after it.
    pub output: HealthOutput,
}

impl HealthRecord {
    /// Calls [`HealthBook::record`] on `book` with the thresholds of `check`, and returns its
    /// report together with the record of the call. Use it instead of calling
    /// [`HealthBook::record`] directly wherever calls are recorded.
    ///
    /// The record is `None` only if the book kept no state for the key it recorded (a bug
    /// in the book): the call is not recordable then, and recording must not stop it.
    pub fn call(
        book: &mut HealthBook,
        key: &ProxyKey,
        target: &Target,
        probe: Probe,
        check: &HealthCheck,
    ) -> (Option<Report>, Option<Self>) {
        let thresholds = HealthThresholds::of(check);
        let before = book.get(key).map(HealthState::of);
        let report = book.record(key, target, probe, thresholds.to_core());
        let Some(after) = book.get(key).map(HealthState::of) else {
            return (report, None);
        };
        let record = Self {
            seq: 0,
            object: key.clone(),
            input: HealthInput {
                target: ProbeTarget::of(target),
                probe: ProbeResult::of(probe),
                thresholds,
                state: before,
            },
            output: HealthOutput {
                report: report.as_ref().map(HealthReport::of),
                state: after,
            },
        };
        (report, Some(record))
    }
}

/// The arguments of one [`HealthBook::record`] call, and the state it started from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthInput {
    /// What was probed.
    pub target: ProbeTarget,
    /// The result.
    pub probe: ProbeResult,
    /// The thresholds, as the health check states them.
    pub thresholds: HealthThresholds,
    /// The book's state for this proxy before the call; `None` when it held none.
    pub state: Option<HealthState>,
}

/// What one [`HealthBook::record`] call returned, and the state it left.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthOutput {
    /// The report for the controller, if any.
    pub report: Option<HealthReport>,
    /// The book's state for this proxy after the call.
    pub state: HealthState,
}

/// A [`Target`], serializable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeTarget {
    /// [`Target::uid`].
    pub uid: String,
    /// [`Target::host`].
    pub host: String,
    /// [`Target::since`]; left out when `None`, so recordings made before it read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

impl ProbeTarget {
    /// The record of `target`.
    pub fn of(target: &Target) -> Self {
        Self {
            uid: target.uid.clone(),
            host: target.host.clone(),
            since: target.since.clone(),
        }
    }

    /// The [`Target`] it records.
    pub fn to_core(&self) -> Target {
        Target {
            uid: self.uid.clone(),
            host: self.host.clone(),
            since: self.since.clone(),
        }
    }
}

/// A [`Probe`], serializable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeResult {
    /// [`Probe::ok`].
    pub ok: bool,
    /// [`Probe::latency_ms`].
    pub latency_ms: u32,
    /// [`Probe::at`].
    pub at: Timestamp,
    /// [`Probe::failure`]; absent in recordings made before causes were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<ProbeFailure>,
    /// [`Probe::egress`]; absent when unknown, and in recordings made before egress checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<std::net::IpAddr>,
}

impl ProbeResult {
    /// The record of `probe`.
    pub fn of(probe: Probe) -> Self {
        Self {
            ok: probe.ok,
            latency_ms: probe.latency_ms,
            at: probe.at,
            failure: probe.failure,
            egress: probe.egress,
        }
    }

    /// The [`Probe`] it records.
    pub fn to_core(self) -> Probe {
        Probe {
            ok: self.ok,
            latency_ms: self.latency_ms,
            at: self.at,
            failure: self.failure,
            egress: self.egress,
        }
    }
}

/// The thresholds of a health check, as `spec.healthCheck` states them. Replay turns them
/// into [`Thresholds`] with [`Thresholds::of`], so the conversion is replayed too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthThresholds {
    /// `failureThreshold`.
    pub failure_threshold: i32,
    /// `successThreshold`.
    pub success_threshold: i32,
}

impl HealthThresholds {
    /// The thresholds of `check`.
    pub fn of(check: &HealthCheck) -> Self {
        Self {
            failure_threshold: check.failure_threshold,
            success_threshold: check.success_threshold,
        }
    }

    /// The [`Thresholds`] the book uses for them.
    pub fn to_core(self) -> Thresholds {
        Thresholds::of(&HealthCheck {
            failure_threshold: self.failure_threshold,
            success_threshold: self.success_threshold,
            ..HealthCheck::default()
        })
    }
}

/// The state of one proxy in a [`HealthBook`] ([`ProxyHealth`]), serializable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthState {
    /// [`ProxyHealth::target`].
    pub target: ProbeTarget,
    /// [`ProxyHealth::successes`].
    pub successes: u32,
    /// [`ProxyHealth::failures`].
    pub failures: u32,
    /// [`ProxyHealth::verdict`].
    pub verdict: Option<bool>,
    /// [`ProxyHealth::reported`].
    pub reported: Option<HealthVerdict>,
    /// [`ProxyHealth::latency_run`]; left out when 0, so that recordings made before it
    /// existed replay unchanged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub latency_run: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl HealthState {
    /// The record of `state`.
    pub fn of(state: &ProxyHealth) -> Self {
        Self {
            target: ProbeTarget::of(state.target()),
            successes: state.successes(),
            failures: state.failures(),
            verdict: state.verdict(),
            reported: state.reported().cloned(),
            latency_run: state.latency_run(),
        }
    }
}

/// A [`Report`], serializable. Its key is the record's `object`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthReport {
    /// [`Report::uid`].
    pub uid: String,
    /// [`Report::reason`].
    pub reason: HealthReportReason,
    /// [`Report::verdict`].
    pub verdict: HealthVerdict,
}

impl HealthReport {
    /// The record of `report`.
    pub fn of(report: &Report) -> Self {
        Self {
            uid: report.uid.clone(),
            reason: HealthReportReason::of(report.reason),
            verdict: report.verdict.clone(),
        }
    }
}

/// A [`ReportReason`], serializable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthReportReason {
    /// [`ReportReason::First`].
    First,
    /// [`ReportReason::VerdictChanged`].
    VerdictChanged,
    /// [`ReportReason::Latency`].
    Latency,
    /// [`ReportReason::Egress`].
    Egress,
}

impl HealthReportReason {
    /// The record of `reason`.
    pub fn of(reason: ReportReason) -> Self {
        match reason {
            ReportReason::First => Self::First,
            ReportReason::VerdictChanged => Self::VerdictChanged,
            ReportReason::Latency => Self::Latency,
            ReportReason::Egress => Self::Egress,
        }
    }

    /// The [`ReportReason`] it records.
    pub fn to_core(self) -> ReportReason {
        match self {
            Self::First => ReportReason::First,
            Self::VerdictChanged => ReportReason::VerdictChanged,
            Self::Latency => ReportReason::Latency,
            Self::Egress => ReportReason::Egress,
        }
    }
}
