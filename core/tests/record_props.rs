//! Redaction against hostile cloud-init content: whatever a user writes into
//! `spec.cloudInit.inline` (or into the referenced Secret), recording a `decide` call never
//! panics, the content never reaches the record where it was carried as cloud-init, and the
//! record replays identically.
//!
//! The hostile contents that matter are the strings a record itself holds (a phase, a
//! reason, a condition type, `True`, a requeue kind, an action name, a field name, a
//! message...): a redaction that replaced strings by equality over the serialised record
//! would turn them into placeholders. [`schema_strings`] derives that list from the types,
//! by serialising the records of a Proxy's whole life (every branch of the action table
//! this file drives, for both kinds of cloud-init source) and the golden corpus, and
//! collecting every string and key, plus every phase, `Provisioned` reason and condition
//! name. The table test checks every one of them; the proptest adds arbitrary strings.
//!
//! "Never reaches the record where it was carried as cloud-init" is stated exactly as: the
//! records of a life with content X equal, field by field, the records of the same life with
//! a reference content R that occurs nowhere else, once the placeholder of each content and
//! the spec hash derived from it are replaced by the same tokens. So X occurs in its records
//! only where R's records hold X as well: where it does not come from the cloud-init.
//!
//! Failing cases are saved under `core/proptest-regressions/record_props.txt`: commit it.

mod regressions;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use proxy_core::conditions::{self, ProvisionedReason};
use proxy_core::digest::placeholder;
use proxy_core::record::{DecideRecord, Header, Record, Recording, replay};
use proxy_core::testing::{self, external_spec, managed_spec};
use proxy_core::{
    Action, CloudInitView, Decided, Effects, ErrorClass, InstanceView, MetadataWrite, Observed,
    Outcome, ProviderDown, ProviderError, ProviderRequest, Reconcile, decide,
};
use proxy_crd::{CloudInit, Phase, ProxySpec, ProxyStatus, SecretKeyRef};
use serde_json::Value;

/// A content that occurs in no record but as cloud-init: the reference the records of any
/// other content are compared with.
const REFERENCE: &str = "#cloud-config\n# the reference content of record_props.rs\n";

/// Where the cloud-init of a life comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// `spec.cloudInit.inline`: the spec and the observation both carry the content.
    Inline,
    /// `spec.cloudInit.secretRef`: only the observation does, and the Secret may be missing.
    Secret,
}

/// What the world looks like to one reconcile of the life.
#[derive(Clone, Debug)]
enum Scene {
    /// The provider's `get` answers this.
    Instance(InstanceView),
    /// Running at [`IP`], with the health engine's verdict.
    Healthy(bool),
    /// Someone removed the spec hash annotation (the instance is adopted).
    AnnotationStripped,
    /// The annotation names another spec (the instance is replaced).
    AnnotationStale,
    /// The next provider call fails with this class.
    CallFails(ErrorClass),
    /// A new generation (which lifts a permanent error's latch).
    NewGeneration,
    /// The provider is missing from the providers config.
    Unconfigured,
    /// The provider failed its health check (no instance exists at this point of the life).
    ProviderDown,
    /// The cloud-init Secret is missing (a [`Source::Secret`] life only).
    SecretMissing,
    /// `kubectl delete px`.
    Deleted,
}

const IP: &str = "10.0.0.7";
const ID: &str = "crawl/proxy-kbqzhquppopaia3n";

/// The scenes of a life: every row of the action table these fixtures can reach.
fn scenes() -> Vec<Scene> {
    use InstanceView as I;
    let running = || I::Running { ip: IP.to_owned() };
    vec![
        Scene::Instance(I::NotLookedUp),
        Scene::Instance(I::NotLookedUp),
        Scene::Instance(I::Provisioning),
        Scene::Instance(running()),
        Scene::Healthy(true),
        Scene::Healthy(false),
        Scene::Healthy(true),
        Scene::AnnotationStripped,
        Scene::Healthy(true),
        Scene::Instance(I::Terminated),
        Scene::Instance(I::NotFound),
        Scene::Instance(I::NotLookedUp),
        Scene::Instance(running()),
        Scene::AnnotationStale,
        Scene::Instance(I::NotFound),
        Scene::CallFails(ErrorClass::Transient),
        Scene::CallFails(ErrorClass::Quota),
        Scene::CallFails(ErrorClass::Stockout),
        Scene::CallFails(ErrorClass::Refused),
        Scene::CallFails(ErrorClass::Permanent),
        Scene::Instance(I::NotLookedUp),
        Scene::NewGeneration,
        Scene::Instance(I::Stopped),
        Scene::Instance(I::NotFound),
        Scene::Instance(I::NotLookedUp),
        Scene::Instance(I::Error(ProviderError::transient("connection reset"))),
        Scene::Instance(I::Error(ProviderError::permanent("access denied"))),
        Scene::NewGeneration,
        Scene::Instance(I::NotFound),
        Scene::ProviderDown,
        Scene::Instance(I::NotLookedUp),
        Scene::Unconfigured,
        Scene::SecretMissing,
        Scene::Instance(running()),
        Scene::Deleted,
        Scene::Deleted,
        Scene::Instance(I::NotFound),
    ]
}

/// One Proxy driven through [`scenes`] by the core's driver, as the controller drives it:
/// two `decide` calls per reconcile when the first asks for a provider call, metadata writes
/// applied to the object.
struct Life {
    source: Source,
    content: String,
    spec: ProxySpec,
    status: ProxyStatus,
    has_finalizer: bool,
    annotation: Option<String>,
    generation: i64,
    deleting: bool,
    /// The error class the provider fails this reconcile's call with.
    fails: Option<ErrorClass>,
    records: Vec<DecideRecord>,
}

impl Life {
    /// The records of the whole life of a Managed proxy whose cloud-init is `content`.
    fn of(source: Source, content: &str) -> Vec<DecideRecord> {
        let cloud_init = match source {
            Source::Inline => CloudInit {
                inline: Some(content.to_owned()),
                secret_ref: None,
            },
            Source::Secret => CloudInit {
                inline: None,
                secret_ref: Some(SecretKeyRef {
                    name: "squid-init".to_owned(),
                    key: "user-data".to_owned(),
                }),
            },
        };
        let mut life = Self {
            source,
            content: content.to_owned(),
            spec: ProxySpec {
                cloud_init: Some(cloud_init),
                ..managed_spec()
            },
            status: ProxyStatus::default(),
            has_finalizer: false,
            annotation: None,
            generation: 1,
            deleting: false,
            fails: None,
            records: Vec::new(),
        };
        // The first reconcile only adds the finalizer.
        life.reconcile(&Scene::Instance(InstanceView::NotLookedUp), 0);
        for (minute, scene) in scenes().iter().enumerate() {
            life.reconcile(scene, minute + 1);
        }
        life.records
    }

    fn reconcile(&mut self, scene: &Scene, minute: usize) {
        let mut cloud_init = CloudInitView::Resolved {
            content: self.content.clone(),
        };
        // The shell looks the instance up whenever status has a providerID.
        let mut instance = match self.status.provider_id {
            Some(_) => InstanceView::Running { ip: IP.to_owned() },
            None => InstanceView::NotLookedUp,
        };
        let mut health = None;
        let mut provider_configured = true;
        let mut provider_down = None;
        let mut fails = None;
        match scene {
            Scene::Instance(view) => instance = view.clone(),
            Scene::Healthy(healthy) => {
                instance = InstanceView::Running { ip: IP.to_owned() };
                health = Some(*healthy);
            }
            Scene::AnnotationStripped => self.annotation = None,
            Scene::AnnotationStale => self.annotation = Some("an-older-spec-hash".to_owned()),
            Scene::CallFails(class) => fails = Some(*class),
            Scene::NewGeneration => self.generation += 1,
            Scene::Unconfigured => provider_configured = false,
            Scene::ProviderDown => {
                provider_down = Some(ProviderDown {
                    message: "provider pods failed its check: connection refused".to_owned(),
                });
            }
            Scene::SecretMissing => {
                if let Source::Secret = self.source {
                    cloud_init = CloudInitView::Unavailable {
                        message: "Secret \"squid-init\" not found".to_owned(),
                    };
                }
            }
            Scene::Deleted => self.deleting = true,
        }
        let mut observed = Observed::test()
            .at(&format!("2026-01-01T00:{minute:02}:00Z"))
            .generation(self.generation)
            .cloud_init(cloud_init)
            .instance(instance);
        observed.object.has_finalizer = self.has_finalizer;
        observed.object.spec_hash_annotation = self.annotation.clone();
        observed.object.deletion_requested = self.deleting;
        observed.provider_configured = provider_configured;
        observed.provider_down = provider_down;
        if let Some(healthy) = health {
            observed = observed.health(IP, healthy);
        }
        self.fails = fails;
        let started = Reconcile::start(self.spec.clone(), self.status.clone(), observed);
        let Ok(plan) = started.run(self);
        self.status = plan.status().clone();
    }
}

/// The life's object and provider carry out each effect of a reconcile; the provider fails
/// the call with the scene's error class, if it has one.
impl Effects for Life {
    type Error = Infallible;

    fn decided(&mut self, decided: Decided<'_>) -> Result<(), Infallible> {
        self.records.push(DecideRecord::of(decided));
        Ok(())
    }

    fn metadata(&mut self, writes: &[MetadataWrite]) -> Result<(), Infallible> {
        for write in writes {
            match write {
                MetadataWrite::AddFinalizer => self.has_finalizer = true,
                MetadataWrite::RemoveFinalizer => self.has_finalizer = false,
                MetadataWrite::SetSpecHash { hash } => self.annotation = Some(hash.clone()),
                // The Secret is the shell's: this simulation of the object has none; its
                // observations say nothing of labels, so none are written.
                MetadataWrite::IssueCredentials { .. }
                | MetadataWrite::RevokeCredentials { .. }
                | MetadataWrite::SetLabels { .. } => {}
            }
        }
        Ok(())
    }

    fn call(&mut self, request: &ProviderRequest) -> Result<Outcome, Infallible> {
        Ok(match (request, self.fails) {
            (ProviderRequest::Create(_), None) => Outcome::Created {
                provider_id: ID.to_owned(),
            },
            (ProviderRequest::Delete { .. }, None) => Outcome::Deleted,
            (request, Some(class)) => Outcome::Failed {
                call: request.call(),
                error: refusal(class),
            },
        })
    }
}

fn refusal(class: ErrorClass) -> ProviderError {
    let message = "the provider said no";
    ProviderError::new(class, message)
}

/// The records of an External proxy's life: no cloud-init, but strings of their own.
fn external_records() -> Vec<DecideRecord> {
    let spec = external_spec();
    let mut records = Vec::new();
    let mut status = ProxyStatus::default();
    for observed in [
        Observed::test().cloud_init(CloudInitView::NotSet),
        Observed::test()
            .cloud_init(CloudInitView::NotSet)
            .health(testing::EXTERNAL_HOST, true),
        Observed::test()
            .cloud_init(CloudInitView::NotSet)
            .deleting(),
    ] {
        let decision = decide(&spec, &status, &observed);
        records.push(DecideRecord::new(&spec, &status, &observed, &decision));
        status = decision.status().clone();
    }
    records
}

fn header() -> Header {
    testing::record_header()
}

/// Every string a record can hold: every string and key of the records of both lives with
/// the fixture content, of an External proxy's life and of the golden corpus (which also
/// holds health records), every phase, `Provisioned` reason and condition name, and the
/// placeholder and spec hash of the fixture content.
fn schema_strings() -> BTreeSet<String> {
    let mut strings = life_strings();
    let corpus = corpus_files();
    assert!(corpus.len() >= 4, "the golden corpus is in tests/replay");
    for line in corpus.iter().flat_map(|text| text.lines()) {
        collect(
            &serde_json::from_str(line).expect("a JSON line"),
            &mut strings,
        );
    }
    for phase in every_phase() {
        collect(&value(&phase), &mut strings);
    }
    strings.extend(ProvisionedReason::ALL.map(|r| r.as_str().to_owned()));
    strings.extend(
        [
            conditions::PROVISIONED,
            conditions::HEALTHY,
            conditions::READY,
            conditions::TRUE,
            conditions::FALSE,
            conditions::UNKNOWN,
        ]
        .map(str::to_owned),
    );
    strings.insert(placeholder(testing::CLOUD_INIT));
    strings.insert(testing::hash());
    strings.insert(String::new());
    strings
}

/// The text of every `*.jsonl` of the golden corpus.
#[expect(
    clippy::disallowed_methods,
    reason = "a test reads the committed corpus"
)]
fn corpus_files() -> Vec<String> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/replay");
    std::fs::read_dir(&corpus)
        .expect("tests/replay exists")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "jsonl"))
        .map(|path| std::fs::read_to_string(&path).expect("a readable recording"))
        .collect()
}

/// Every string and key of the records of both lives with the fixture content, and of an
/// External proxy's life.
fn life_strings() -> BTreeSet<String> {
    let mut strings = BTreeSet::new();
    let records = [Source::Inline, Source::Secret]
        .into_iter()
        .flat_map(|source| Life::of(source, testing::CLOUD_INIT))
        .chain(external_records());
    for record in records {
        collect(&value(&Record::from(record)), &mut strings);
    }
    strings
}

fn every_phase() -> [Phase; 6] {
    let all = [
        Phase::Pending,
        Phase::Provisioning,
        Phase::Ready,
        Phase::Unhealthy,
        Phase::Failed,
        Phase::Deleting,
    ];
    // A new phase fails to compile here until it is added above.
    for phase in all {
        match phase {
            Phase::Pending
            | Phase::Provisioning
            | Phase::Ready
            | Phase::Unhealthy
            | Phase::Failed
            | Phase::Deleting => {}
        }
    }
    all
}

fn value(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("the test's values serialize")
}

fn collect(value: &Value, into: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            into.insert(s.clone());
        }
        Value::Object(map) => {
            for (key, value) in map {
                into.insert(key.clone());
                collect(value, into);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, into)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `records` as JSON, with the placeholder of `content` and the spec hashes derived from
/// it (the ones `decide` computes from the content) replaced by fixed tokens.
fn blanked(content: &str, records: &[DecideRecord]) -> Vec<Value> {
    let stand_in = placeholder(content);
    let hash = testing::hash_of(&managed_spec(), Some(content));
    records
        .iter()
        .map(|record| {
            let mut json = value(&Record::from(record.clone()));
            blank(&mut json, &|s| {
                if s == stand_in {
                    Some("<cloud-init placeholder>")
                } else if s == hash {
                    Some("<spec hash>")
                } else {
                    None
                }
            });
            json
        })
        .collect()
}

fn blank(value: &mut Value, token: &impl Fn(&str) -> Option<&'static str>) {
    match value {
        Value::String(s) => {
            if let Some(token) = token(s) {
                *s = token.to_owned();
            }
        }
        Value::Object(map) => map.values_mut().for_each(|v| blank(v, token)),
        Value::Array(items) => items.iter_mut().for_each(|v| blank(v, token)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The blanked records of the reference life, made once per source.
fn reference(source: Source) -> &'static [Value] {
    static INLINE: OnceLock<Vec<Value>> = OnceLock::new();
    static SECRET: OnceLock<Vec<Value>> = OnceLock::new();
    let cell = match source {
        Source::Inline => &INLINE,
        Source::Secret => &SECRET,
    };
    cell.get_or_init(|| blanked(REFERENCE, &Life::of(source, REFERENCE)))
}

/// Where `got` and `want` first differ: a JSON pointer and both values.
fn first_difference(got: &Value, want: &Value, path: String) -> Option<(String, Value, Value)> {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) if g.len() == w.len() => {
            g.iter().find_map(|(k, v)| {
                let path = format!("{path}/{k}");
                match w.get(k) {
                    Some(w) => first_difference(v, w, path),
                    None => Some((path, v.clone(), Value::Null)),
                }
            })
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => g
            .iter()
            .zip(w)
            .enumerate()
            .find_map(|(i, (g, w))| first_difference(g, w, format!("{path}/{i}"))),
        (g, w) => (g != w).then(|| (path, g.clone(), w.clone())),
    }
}

/// The properties, for one content: recording every call of both lives works, the records
/// equal the reference records but for the placeholder and the hash, and they replay
/// identically.
fn check(content: &str) -> Result<(), TestCaseError> {
    for source in [Source::Inline, Source::Secret] {
        let records = Life::of(source, content);
        let got = blanked(content, &records);
        let want = reference(source);
        prop_assert_eq!(got.len(), want.len());
        for (index, (got, want)) in got.iter().zip(want).enumerate() {
            if let Some((path, got, want)) = first_difference(got, want, String::new()) {
                return Err(TestCaseError::fail(format!(
                    "{source:?} life, record {index}: {path} is {got}, the reference's is {want}"
                )));
            }
        }
        let mut recording = Recording::new(header());
        for record in records {
            recording.push(Record::from(record));
        }
        let text = recording
            .to_jsonl()
            .map_err(|e| TestCaseError::fail(format!("{source:?}: {e}")))?;
        let report = replay(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(
            report.is_identical(),
            "{:?} life of {:?} diverges: {}",
            source,
            content,
            report.divergence.map(|d| d.to_string()).unwrap_or_default()
        );
    }
    Ok(())
}

#[test]
fn the_reference_life_covers_the_action_table() {
    // The lives must reach the rows whose strings matter, or the list below proves little.
    let strings = life_strings();
    for expected in ProvisionedReason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| !matches!(*r, "EndpointMissing"))
        .chain([
            "AwaitingProbe",
            "ProbeSucceeded",
            "Create",
            "Delete",
            "SetSpecHash",
            "AddFinalizer",
            "RemoveFinalizer",
            "PatchStatus",
            "Event",
            "AwaitChange",
            "Backoff",
            "After",
            "Warning",
            "Normal",
        ])
    {
        assert!(strings.contains(expected), "no record holds {expected:?}");
    }
    for source in [Source::Inline, Source::Secret] {
        let creates = Life::of(source, testing::CLOUD_INIT)
            .iter()
            .flat_map(|r| r.output.actions().to_vec())
            .filter(|a| matches!(a, Action::Create(_)))
            .count();
        assert!(creates >= 3, "{source:?}: {creates} creates");
    }
}

#[test]
fn every_string_the_record_schema_emits_is_harmless_as_cloud_init() {
    let strings = schema_strings();
    assert!(strings.len() > 100, "{} strings", strings.len());
    let (mut panics, mut differences) = (Vec::new(), Vec::new());
    for content in &strings {
        match std::panic::catch_unwind(|| check(content)) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => differences.push(format!("{content:?}: {error}")),
            Err(panic) => panics.push(format!(
                "{content:?}: {}",
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic")
            )),
        }
    }
    assert!(
        panics.is_empty() && differences.is_empty(),
        "of {} contents, {} panic (the first: {}) and {} reach the record (the first: {})",
        strings.len(),
        panics.len(),
        panics.first().map_or("none", String::as_str),
        differences.len(),
        differences.first().map_or("none", String::as_str),
    );
}

/// A content: a string a record holds, such a string with something around it, or anything.
fn content() -> impl Strategy<Value = String> {
    let schema: Vec<String> = schema_strings().into_iter().collect();
    prop_oneof![
        3 => prop::sample::select(schema.clone()),
        1 => (prop::sample::select(schema), ".{0,3}", ".{0,3}")
            .prop_map(|(s, before, after)| format!("{before}{s}{after}")),
        2 => any::<String>(),
    ]
}

proptest! {
    // 64 cases by default: each runs two lives and replays them, and every string a record
    // holds is checked by the table test above anyway. `PROPTEST_CASES` raises it.
    #![proptest_config(regressions::config("record_props", Some(64)))]

    #[test]
    fn any_cloud_init_content_records_and_replays_without_reaching_the_record(
        content in content(),
    ) {
        check(&content)?;
    }
}
