//! Replay: re-run every recorded call on its recorded input and compare the outputs.

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use proxy_crd::{ProxySpec, ProxyStatus};
use serde_json::Value;

use super::canonical;
use super::file::{Recording, ReplayError};
use super::redact;
use super::schema::{
    DecideRecord, Header, HealthOutput, HealthRecord, HealthReport, HealthState, Record,
};
use crate::action::Decision;
use crate::health::{
    HealthBook, LATENCY_FLOOR_MS, LATENCY_REPORT_INTERVAL, Probe, Report, ReportReason, Thresholds,
};
use crate::key::{ObjectKey, ProxyKey};
use crate::observed::{HealthVerdict, Observed};

/// Replays `text`, a recording, through this build's [`decide`](fn@crate::decide) and health
/// book. See [`Recording::replay_with`].
///
/// # Errors
///
/// As [`Recording::parse`] and [`Recording::replay_with`].
pub fn replay(text: &str) -> Result<ReplayReport, ReplayError> {
    replay_with(text, crate::decide)
}

/// Replays `text`, a recording, with `decide` standing in for [`decide`](fn@crate::decide):
/// a test injects a changed rule this way and checks where the recording diverges.
///
/// # Errors
///
/// As [`Recording::parse`] and [`Recording::replay_with`].
pub fn replay_with<F>(text: &str, decide: F) -> Result<ReplayReport, ReplayError>
where
    F: FnMut(&ProxySpec, &ProxyStatus, &Observed) -> Decision,
{
    Recording::parse(text)?.replay_with(decide)
}

impl Recording {
    /// Replays this recording through this build's [`decide`](fn@crate::decide) and health
    /// book. See [`Recording::replay_with`].
    ///
    /// # Errors
    ///
    /// As [`Recording::replay_with`].
    pub fn replay(&self) -> Result<ReplayReport, ReplayError> {
        self.replay_with(crate::decide)
    }

    /// Re-runs each record's call on its recorded input, in file order, and stops at the
    /// first record whose output differs from the recorded one.
    ///
    /// - A decide record calls `decide` on its input. A redacted one goes through the
    ///   hash mapping described in the [module docs](super#secrets).
    /// - A health record calls [`HealthBook::record`] on a book holding the recorded state
    ///   before the call, and compares the report and the state after it. Consecutive
    ///   records of a proxy reuse the book (a delivery in between is replayed with
    ///   [`HealthBook::delivered`]); any other state is rebuilt through the book's public
    ///   calls, and checked to be exactly the recorded one.
    ///
    /// Outputs are compared as JSON, which is what the file holds.
    ///
    /// # Errors
    ///
    /// [`ReplayError::Unreproducible`] when a health record's state before the call is one
    /// the book cannot reach (counting both successes and failures, no verdict, a delivered
    /// verdict about another host, or a run longer than 2^20 results), or when an output
    /// cannot be turned into JSON to compare.
    pub fn replay_with<F>(&self, mut decide: F) -> Result<ReplayReport, ReplayError>
    where
        F: FnMut(&ProxySpec, &ProxyStatus, &Observed) -> Decision,
    {
        let mut books = Books::default();
        let mut checked = 0;
        let mut divergence = None;
        for (index, record) in self.records().iter().enumerate() {
            let line = index + 2;
            let replayed = match record {
                Record::Decide(record) => replay_decide(record, &mut decide),
                Record::Health(record) => books.replay(record),
                Record::Pool(record) => record.replay(),
            };
            let (recorded, replayed) = replayed.map_err(|message| ReplayError::Unreproducible {
                line,
                seq: record.seq(),
                message,
            })?;
            checked += 1;
            if let Some(path) = canonical::first_difference(&recorded, &replayed) {
                divergence = Some(Divergence {
                    index,
                    line,
                    seq: record.seq(),
                    kind: record.kind(),
                    object: record.object(),
                    at: record.at(),
                    path,
                    recorded: canonical::pretty(&recorded),
                    replayed: canonical::pretty(&replayed),
                });
                break;
            }
        }
        Ok(ReplayReport {
            header: self.header().clone(),
            records: self.records().len(),
            checked,
            divergence,
            notes: notes(self.header()),
        })
    }
}

/// What a replay found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayReport {
    /// The recording's header: who recorded it, under which configuration. Compare
    /// `header.operator.commit` with the replaying build's: a replay by another commit is
    /// allowed, and a divergence then may be a change of behaviour rather than a bug.
    pub header: Header,
    /// How many records the recording holds.
    pub records: usize,
    /// How many were replayed: all of them, or up to and including the divergent one.
    pub checked: usize,
    /// The first record whose replayed output differs from the recorded one.
    pub divergence: Option<Divergence>,
    /// Differences between the recording's configuration and this build's that may explain
    /// a divergence (compiled-in constants the records cannot carry as inputs).
    pub notes: Vec<String>,
}

impl ReplayReport {
    /// Whether every record replayed to its recorded output.
    pub fn is_identical(&self) -> bool {
        self.divergence.is_none()
    }
}

/// The first record whose replayed output differs from the recorded one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Its position among the records, from 0 ([`Recording::records`]).
    pub index: usize,
    /// Its line in the file, from 1 (the header is line 1).
    pub line: usize,
    /// Its sequence number.
    pub seq: u64,
    /// `"decide"` or `"health"`.
    pub kind: &'static str,
    /// The object.
    pub object: ObjectKey,
    /// The time of the call ([`Record::at`]).
    pub at: Timestamp,
    /// Where the outputs first differ, as a JSON pointer into the output (`/actions/0`);
    /// empty when they differ as a whole.
    pub path: String,
    /// The recorded output, as indented JSON with sorted keys.
    pub recorded: String,
    /// The replayed output, in the same form.
    pub replayed: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "the whole output"
        } else {
            &self.path
        };
        writeln!(
            f,
            "line {} (seq {}), {} {} at {}: the output differs at {path}",
            self.line, self.seq, self.kind, self.object, self.at
        )?;
        writeln!(f, "recorded:\n{}", self.recorded)?;
        write!(f, "replayed:\n{}", self.replayed)
    }
}

fn notes(header: &Header) -> Vec<String> {
    let config = &header.config;
    let mut notes = Vec::new();
    if config.latency_floor_ms != LATENCY_FLOOR_MS {
        notes.push(format!(
            "recorded with a health latency floor of {} ms, this build uses {LATENCY_FLOOR_MS} ms",
            config.latency_floor_ms
        ));
    }
    if config.latency_report_interval != LATENCY_REPORT_INTERVAL {
        notes.push(format!(
            "recorded with a health latency report interval of {:?}, this build uses {:?}",
            config.latency_report_interval, LATENCY_REPORT_INTERVAL
        ));
    }
    notes
}

fn replay_decide<F>(record: &DecideRecord, decide: &mut F) -> Result<(Value, Value), String>
where
    F: FnMut(&ProxySpec, &ProxyStatus, &Observed) -> Decision,
{
    let input = &record.input;
    let replayed = match &record.redaction {
        Some(redaction) => redact::decide_redacted(input, redaction, decide),
        None => decide(&input.spec, &input.status, &input.observed),
    };
    Ok((to_value(&record.output)?, to_value(&replayed)?))
}

/// `value` as JSON, the form outputs are compared in.
fn to_value(value: &impl serde::Serialize) -> Result<Value, String> {
    serde_json::to_value(value).map_err(|e| format!("the output does not serialize: {e}"))
}

/// The longest run of consecutive results a health state may be rebuilt with.
const MAX_REBUILT_RUN: u32 = 1 << 20;

/// One health book per proxy, as the replay left it.
#[derive(Debug, Default)]
struct Books {
    by_key: BTreeMap<ProxyKey, HealthBook>,
}

impl Books {
    fn replay(&mut self, record: &HealthRecord) -> Result<(Value, Value), String> {
        let key = &record.object;
        let input = &record.input;
        let book = self.book_at(key, input.state.as_ref())?;
        let report = book.record(
            key,
            &input.target.to_core(),
            input.probe.to_core(),
            input.thresholds.to_core(),
        );
        let state = book
            .get(key)
            .map(HealthState::of)
            .ok_or("HealthBook::record kept no state for the key it recorded")?;
        let replayed = HealthOutput {
            report: report.as_ref().map(HealthReport::of),
            state,
        };
        Ok((to_value(&record.output)?, to_value(&replayed)?))
    }

    /// A book holding exactly `before` for `key`.
    fn book_at(
        &mut self,
        key: &ProxyKey,
        before: Option<&HealthState>,
    ) -> Result<&mut HealthBook, String> {
        let current = self
            .by_key
            .get(key)
            .and_then(|book| book.get(key))
            .map(HealthState::of);
        if current.as_ref() != before {
            let book = match (current, before) {
                (_, None) => HealthBook::new(),
                (current, Some(before)) => {
                    match current.and_then(|current| delivered_since(&current, before)) {
                        Some(reported) => {
                            let mut book = self.by_key.remove(key).unwrap_or_default();
                            let delivered = book.delivered(&Report {
                                key: key.clone(),
                                uid: before.target.uid.clone(),
                                reason: ReportReason::First,
                                verdict: reported.clone(),
                            });
                            let now = book.get(key).map(HealthState::of);
                            if delivered && now.as_ref() == Some(before) {
                                book
                            } else {
                                rebuild(key, before)?
                            }
                        }
                        None => rebuild(key, before)?,
                    }
                }
            };
            self.by_key.insert(key.clone(), book);
        }
        Ok(self.by_key.entry(key.clone()).or_default())
    }
}

/// The verdict delivered since `current` when `before` is `current` after a delivery: the
/// same but for the verdict last delivered.
fn delivered_since<'a>(
    current: &HealthState,
    before: &'a HealthState,
) -> Option<&'a HealthVerdict> {
    let reported = before.reported.as_ref()?;
    let after = HealthState {
        reported: Some(reported.clone()),
        latency_run: 0,
        ..current.clone()
    };
    (after == *before).then_some(reported)
}

/// A book holding `state` for `key`, built through the book's public calls only: seed the
/// delivered verdict, then count the recorded run with thresholds chosen to end on the
/// recorded verdict. Checked against `state` at the end.
fn rebuild(key: &ProxyKey, state: &HealthState) -> Result<HealthBook, String> {
    let HealthState {
        target,
        successes,
        failures,
        verdict,
        reported,
        latency_run,
    } = state;
    if *latency_run > *successes {
        return Err(
            "a state whose latency run is longer than its run of passing probes".to_owned(),
        );
    }
    let verdict =
        verdict.ok_or("a state without a verdict: the book holds none, it counts at once")?;
    let run = match (*successes, *failures) {
        (0, 0) => None,
        (n, 0) => Some((true, n)),
        (0, n) => Some((false, n)),
        (_, _) => {
            return Err(
                "a state counting both successes and failures: each result resets the other count"
                    .to_owned(),
            );
        }
    };
    if run.is_some_and(|(_, n)| n > MAX_REBUILT_RUN) {
        return Err(format!(
            "a run of more than {MAX_REBUILT_RUN} results is not rebuilt"
        ));
    }
    let mut book = HealthBook::new();
    let mut current = None;
    let mut at = Timestamp::UNIX_EPOCH;
    // A probe at the delivered latency leaves the latency run at 0; the last
    // `latency_run` passing probes are moved far from it.
    let (mut steady, mut moved) = (0, 0);
    if let Some(reported) = reported {
        steady = reported.latency_ms;
        moved = reported
            .latency_ms
            .saturating_mul(2)
            .saturating_add(LATENCY_FLOOR_MS + 1);
        if reported.host != target.host {
            return Err(format!(
                "a delivered verdict about {} in a state about {}",
                reported.host, target.host
            ));
        }
        book.seed(key, &target.uid, target.since.clone(), reported.clone());
        current = Some(reported.healthy);
        at = reported.probed_at;
    }
    let target = target.to_core();
    // The probe's time only decides whether a report goes out, never the state; its
    // latency only the latency run, which the last `latency_run` passing probes make.
    let count = |book: &mut HealthBook, ok: bool, times: u32, toward: u32| {
        let thresholds = if ok {
            Thresholds::new(1, toward)
        } else {
            Thresholds::new(toward, 1)
        };
        for n in 0..times {
            let latency_ms = if ok && times - n <= *latency_run {
                moved
            } else {
                steady
            };
            let _ = book.record(
                key,
                &target,
                Probe {
                    ok,
                    latency_ms,
                    at,
                    failure: None,
                    egress: None,
                },
                thresholds,
            );
        }
    };
    match run {
        None if current == Some(verdict) => {}
        None => {
            return Err(
                "a state with zero counters whose verdict is not the delivered one".to_owned(),
            );
        }
        // A run of `ok` results ending on the verdict `ok`: from the opposite verdict, it
        // flips on the last result.
        Some((ok, n)) if ok == verdict => count(&mut book, ok, n, n),
        // A run that has not flipped the verdict: reach the verdict first, then count the
        // run one short of flipping it back.
        Some((ok, n)) => {
            if current != Some(verdict) {
                count(&mut book, verdict, 1, 1);
            }
            count(&mut book, ok, n, n + 1);
        }
    }
    let rebuilt = book.get(key).map(HealthState::of);
    if rebuilt.as_ref() == Some(state) {
        Ok(book)
    } else {
        Err(format!(
            "the recorded health state {state:?} could not be rebuilt (got {rebuilt:?})"
        ))
    }
}
