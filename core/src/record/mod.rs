//! The recorded observation log: every core call with its whole input and its output, as
//! JSON Lines, and a pure replay that re-runs the calls and reports the first divergence.
//!
//! # Why
//!
//! The core is deterministic: the same commit and the same inputs give the same outputs.
//! Recording at the core boundary (domain values in, decisions out; never raw HTTP) is
//! therefore enough to explain any decision after the fact, and to turn an incident into a
//! regression test: a file copied into `tests/replay/` is replayed by every `cargo test`.
//! The shell records; this module defines the file, reads and writes it, replays it, and
//! formats a timeline. It does no I/O: files come in and go out as strings.
//!
//! # The file
//!
//! One JSON Lines file per incident window. Line 1 is the [`Header`]; every other line is
//! one [`Record`], in recording order ([`Record::seq`] strictly increases). Every line is
//! canonical JSON (object keys sorted at every level, no whitespace), so two recordings of
//! the same calls are byte-identical and two recordings of similar ones diff line by line;
//! [`Recording::to_jsonl`] of a parsed file gives back its bytes. Shortened:
//!
//! ```text
//! {"config":{"latencyFloorMs":20,"latencyReportInterval":"1m","providers":["pods"],"timing":{..}},"kind":"header","operator":{"commit":"7a29605","version":"0.1.0"},"recordedAt":"2026-11-30T12:00:00Z","schema":1}
//! {"input":{"observed":{"cloudInit":{"Resolved":{"content":"sha256:3b0c.."}},"health":null,"instance":{"Running":{"ip":"10.0.0.7"}},"now":"2026-11-30T12:00:01Z",..},"spec":{..},"status":{..}},"kind":"decide","object":"crawl/p1","output":{"actions":[..],"requeue":{"After":"1m"},"status":{..}},"redaction":{"specHash":"9f2e.."},"seq":1}
//! {"input":{"probe":{"at":"2026-11-30T12:00:30Z","latencyMs":5000,"ok":false},"state":{..},"target":{"host":"10.0.0.7","uid":".."},"thresholds":{"failureThreshold":3,"successThreshold":1}},"kind":"health","object":"crawl/p1","output":{"report":null,"state":{..}},"seq":2}
//! ```
//!
//! - `decide` ([`DecideRecord`]): one call of [`decide`](fn@crate::decide), with `spec`,
//!   `status` and `observed` (which holds `now`, the provider's answers, the health verdict
//!   and the timing: everything nondeterministic) and the [`Decision`](crate::Decision). The
//!   two calls of a reconcile are two records: the second's `status` is the first's output
//!   status and its `observed.outcome` is set.
//! - `health` ([`HealthRecord`]): one call of
//!   [`HealthBook::record`](crate::health::HealthBook::record), with the probe result, the
//!   thresholds and the book's state for that proxy before the call, and the report and the
//!   state after it. Recording the state makes each record replayable on its own: a
//!   recording window rarely starts with the book.
//!
//! The lease book is not recorded in schema 1: its calls depend on the whole fleet's state,
//! which is too large to repeat per call, and a stream of its calls is only replayable from
//! an empty book. A later schema may add it.
//!
//! # Versions
//!
//! Every record type denies unknown fields, and the header's `schema` is checked first: a
//! file of another schema is refused with [`ReplayError::UnsupportedSchema`], naming the
//! operator version that wrote it. A new schema adds a migration from the previous one in
//! [`Recording::parse`], so that old incident files keep replaying. Replaying with another
//! commit than the recording's is allowed ([`ReplayReport::header`] says which one recorded
//! it): a divergence then is either a bug or an intended change of behaviour.
//!
//! # Secrets
//!
//! The resolved cloud-init content (user data, often with credentials) never reaches a
//! recording: [`DecideRecord::new`] and [`Recording::push`] replace it by [`placeholder`](crate::digest::placeholder)
//! (`sha256:` and the hex SHA-256 of the content) in the fields that carry it, and only
//! there: `spec.cloudInit.inline`, `observed.cloudInit` when resolved, and the user data of a
//! create in the output ([`CreateRequest::cloud_init`](crate::CreateRequest::cloud_init)).
//! [`decide`](fn@crate::decide) copies the content into a create request and nowhere else:
//! no message, event or status field quotes it.
//!
//! Redaction is by type, never by the value of a string: a string elsewhere in the record
//! that happens to equal the content (a phase such as `Provisioning`, a reason, `True`, the
//! provider's name) is not the content, and stays as it is. Replacing strings by equality
//! over the serialised record, as an earlier version did, turned a Proxy whose inline
//! cloud-init was `Provisioning` into a record that no longer parsed, and a panic on every
//! reconcile of it. Nothing on the recording path serialises and parses back, and nothing
//! there panics: a record that does not serialise is an error the recorder logs, and drops.
//!
//! The catch is that [`decide`](fn@crate::decide) hashes the content: the spec hash of the
//! redacted input (the *stand-in*) is not the real one, so replaying the redacted input as it
//! is would see the hash annotation differ and replace the machine. The record therefore
//! also keeps the real spec hash ([`Redaction::spec_hash`]), which is no secret: it is the
//! value of the object's own hash annotation. `decide` uses the hash in two ways only: it
//! compares it for equality with the annotation, and it writes it with
//! [`SetSpecHash`](crate::Action::SetSpecHash). Replay of a redacted record replaces the real
//! hash by the stand-in in the annotation before the call, and the stand-in by the real hash
//! in the `SetSpecHash` actions of the output after it. Every comparison then comes out as
//! it did on the real input. Last, replay redacts its output by type as the recorder redacted
//! the real one: a create's user data that is one of the input's placeholders came from the
//! redacted input and stays; any other (a changed rule's) is replaced by its placeholder. The
//! output is then the real output, redacted. So replay checks every rule of the action table
//! on redacted records, and a changed rule diverges exactly as it would on the real input.
//!
//! Alternatives, and why not: recording the content (a leak in every incident file);
//! hashing `sha256(content)` instead of the content in the spec hash (a new hash value for
//! every machine: the whole fleet would be replaced on upgrade); recording the output of the
//! redacted input instead of the real one (the recording would no longer say what happened).
//!
//! Limits: a redacted record takes the spec hash function itself on trust, since it cannot
//! recompute the real hash without the content. A change to what the hash covers or how it
//! is encoded is caught by `spec_hash`'s pinned-value test, not by replay. And the
//! placeholder, like the annotation, lets anyone who can guess the whole content confirm the
//! guess; it reveals nothing else.
//!
//! # Driving it
//!
//! The shell makes a [`DecideRecord::new`] after each `decide` call (and the record of
//! [`HealthRecord::call`] for a probe result), numbers it, keeps its line (a ring per
//! object under one byte budget), and serves the kept lines after a [`Header`] line when
//! asked: the same file [`Recording::to_jsonl`] writes. `proxy-operator replay FILE` parses it, prints
//! [`timeline`] and replays it with [`replay`].

mod canonical;
mod file;
mod pool;
mod redact;
mod replay;
mod schema;
mod timeline;

pub use file::{Recording, ReplayError};
pub use pool::{PoolInput, PoolRecord};
pub use replay::{Divergence, ReplayReport, replay, replay_with};
pub use schema::{
    Config, DecideInput, DecideRecord, Header, HealthInput, HealthOutput, HealthRecord,
    HealthReport, HealthReportReason, HealthState, HealthThresholds, Operator, ProbeResult,
    ProbeTarget, Record, Redaction, SCHEMA,
};
pub use timeline::timeline;
