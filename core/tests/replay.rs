//! The recording format and replay, on small recordings built here: the schema round trip,
//! canonical bytes, errors that name their line, redaction, health state rebuilding, and
//! the timeline. The golden incident corpus is replayed by `replay_golden.rs`.

use proxy_core::ProxyKey;
use proxy_core::digest::placeholder;
use proxy_core::health::{HealthBook, Probe, Target};
use proxy_core::record::{
    DecideRecord, Header, HealthRecord, Record, Recording, ReplayError, SCHEMA, replay,
    replay_with, timeline,
};
use proxy_core::testing::{self, CLOUD_INIT, T0, at, managed_spec};
use proxy_core::{CloudInitView, Decision, InstanceView, Observed, Outcome, decide};
use proxy_crd::{HealthCheck, ProxySpec, ProxyStatus};
use serde_json::Value;
use sha2::{Digest, Sha256};

const ID: &str = "crawl/proxy-kbqzhquppopaia3n";

fn header() -> Header {
    testing::record_header()
}

/// Records `decide(spec, status, observed)` into `recording`, and returns the decision.
fn call(
    recording: &mut Recording,
    spec: &ProxySpec,
    status: &ProxyStatus,
    observed: &Observed,
) -> Decision {
    let decision = decide(spec, status, observed);
    recording.push(Record::from(DecideRecord::new(
        spec, status, observed, &decision,
    )));
    decision
}

/// A create (both calls of the reconcile) and a first probe.
fn sample() -> Recording {
    let mut recording = Recording::new(header());
    let spec = managed_spec();
    let observed = Observed::test();
    let first = call(&mut recording, &spec, &ProxyStatus::default(), &observed);
    let observed = observed.outcome(Outcome::Created {
        provider_id: ID.to_owned(),
    });
    let _ = call(&mut recording, &spec, first.status(), &observed);
    let mut book = HealthBook::new();
    let (_, record) = HealthRecord::call(
        &mut book,
        &ProxyKey::new("crawl", "px-1"),
        &target("10.0.0.7"),
        Probe {
            ok: true,
            latency_ms: 42,
            at: at("2026-01-01T00:00:30Z"),
            failure: None,
            egress: None,
        },
        &HealthCheck::default(),
    );
    recording.push(Record::from(
        record.expect("the book keeps the state it recorded"),
    ));
    recording
}

fn target(host: &str) -> Target {
    Target {
        uid: testing::UID.to_owned(),
        host: host.to_owned(),
        since: None,
    }
}

/// `text` with line `number` (from 1) replaced by `change(line)`.
fn edit_line(text: &str, number: usize, change: impl FnOnce(&str) -> String) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[number - 1] = change(&lines[number - 1]);
    lines.join("\n") + "\n"
}

/// `text` with line `number` parsed, changed as JSON, and written back.
fn edit_json(text: &str, number: usize, change: impl FnOnce(&mut Value)) -> String {
    edit_line(text, number, |line| {
        let mut value: Value = serde_json::from_str(line).unwrap();
        change(&mut value);
        value.to_string()
    })
}

fn malformed(text: &str) -> (usize, String) {
    match Recording::parse(text) {
        Err(ReplayError::Malformed { line, message }) => (line, message),
        other => panic!("expected a malformed line, got {other:?}"),
    }
}

/// `decision`, changed through its JSON form (a `Decision` is built by `decide` only).
fn tweak(decision: Decision, change: impl FnOnce(&mut Value)) -> Decision {
    let mut value = serde_json::to_value(decision).unwrap();
    change(&mut value);
    serde_json::from_value(value).unwrap()
}

// ---- Schema and canonical form -------------------------------------------------------------

#[test]
fn the_schema_round_trips_to_the_same_records_and_bytes() {
    let recording = sample();
    let text = recording.to_jsonl().unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(text.ends_with("}\n"));
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["kind"], "header");
    assert_eq!(header["schema"], SCHEMA);
    assert_eq!(header["operator"]["commit"], "abc1234");
    assert_eq!(header["config"]["timing"]["quotaRetry"], "5m");
    assert_eq!(header["config"]["latencyFloorMs"], 20);
    let seqs: Vec<u64> = recording.records().iter().map(Record::seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    let kinds: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["kind"].to_string())
        .collect();
    assert_eq!(
        kinds,
        [r#""header""#, r#""decide""#, r#""decide""#, r#""health""#]
    );

    let parsed = Recording::parse(&text).unwrap();
    assert_eq!(parsed, recording);
    assert_eq!(parsed.to_jsonl().unwrap(), text);
    // Without the final newline too.
    assert_eq!(Recording::parse(text.trim_end()).unwrap(), recording);
}

#[test]
fn the_canonical_form_does_not_depend_on_key_order_or_whitespace() {
    let text = sample().to_jsonl().unwrap();
    // Every line rewritten with its keys in reverse order and spaces everywhere.
    let shuffled: String = text
        .lines()
        .map(|line| reversed(&serde_json::from_str(line).unwrap()) + "\n")
        .collect();
    assert_ne!(shuffled, text);
    assert_eq!(
        Recording::parse(&shuffled).unwrap().to_jsonl().unwrap(),
        text
    );
}

fn reversed(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{} : {}", Value::String(k.clone()), reversed(v)))
                .collect();
            format!("{{ {} }}", entries.join(" , "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(reversed).collect();
            format!("[ {} ]", items.join(" , "))
        }
        scalar => scalar.to_string(),
    }
}

#[test]
fn an_unknown_schema_is_refused_with_a_clear_error() {
    let text = sample().to_jsonl().unwrap();
    // Schema 2 may well have fields schema 1 does not know: the schema is what is reported.
    let text = edit_json(&text, 1, |header| {
        header["schema"] = 2.into();
        header["shards"] = 4.into();
    });
    let error = Recording::parse(&text).unwrap_err();
    assert_eq!(
        error,
        ReplayError::UnsupportedSchema {
            found: 2,
            version: "0.1.0".to_owned(),
            commit: "abc1234".to_owned(),
        }
    );
    assert_eq!(
        error.to_string(),
        "line 1: recording schema 2 is not supported: this build reads schema 1 only; the file \
         was written by operator 0.1.0 (commit abc1234), replay it with that version"
    );
    assert_eq!(replay(&text).unwrap_err(), error);
}

#[test]
fn a_malformed_line_is_named_by_its_number() {
    let text = sample().to_jsonl().unwrap();
    let cases: Vec<(String, usize, &str)> = vec![
        (String::new(), 1, "line 1 is empty"),
        (
            text.lines().skip(1).collect::<Vec<_>>().join("\n"),
            1,
            "line 1 must be the header (kind \"header\"), found kind \"decide\"",
        ),
        (
            edit_json(&text, 1, |h| h["schema"] = "1".into()),
            1,
            "the header needs an integer `schema`, found \"1\"",
        ),
        (
            edit_json(&text, 1, |h| {
                h.as_object_mut().unwrap().remove("operator");
            }),
            1,
            "missing field `operator`",
        ),
        (
            edit_line(&text, 3, |l| l[..l.len() / 2].to_owned()),
            3,
            "not JSON (column",
        ),
        (
            edit_json(&text, 2, |r| {
                r.as_object_mut().unwrap().remove("output");
            }),
            2,
            "missing field `output`",
        ),
        (
            edit_json(&text, 2, |r| r["decidedBy"] = "me".into()),
            2,
            "unknown field `decidedBy`",
        ),
        (
            edit_json(&text, 4, |r| r["input"]["probe"]["jitter"] = 3.into()),
            4,
            "unknown field `jitter`",
        ),
        (
            edit_json(&text, 3, |r| r["kind"] = "executed".into()),
            3,
            "unknown variant `executed`",
        ),
        (
            edit_json(&text, 3, |r| {
                r.as_object_mut().unwrap().remove("kind");
            }),
            3,
            "a record needs a string `kind`",
        ),
        (
            edit_line(&text, 3, |_| text.lines().next().unwrap().to_owned()),
            3,
            "a header may only be the first line",
        ),
        (edit_line(&text, 3, |_| String::new()), 3, "empty line"),
        (
            edit_json(&text, 3, |r| r["seq"] = 1.into()),
            3,
            "seq 1 does not follow seq 1",
        ),
        (
            edit_json(&text, 2, |r| r["object"] = "crawl/other".into()),
            2,
            "object \"crawl/other\" is not the input's object \"crawl/px-1\"",
        ),
        (
            edit_json(&text, 4, |r| r["object"] = "px-1".into()),
            4,
            "not of the form namespace/name",
        ),
    ];
    for (text, line, needle) in cases {
        let (found, message) = malformed(&text);
        assert_eq!(found, line, "{message}");
        assert!(
            message.contains(needle),
            "line {line}: {message:?} lacks {needle:?}"
        );
        let shown = Recording::parse(&text).unwrap_err().to_string();
        assert!(shown.starts_with(&format!("line {line}: ")), "{shown}");
    }
}

// ---- Redaction -----------------------------------------------------------------------------

#[test]
fn the_cloud_init_never_reaches_the_file_and_the_file_still_replays() {
    let text = sample().to_jsonl().unwrap();
    assert!(!text.contains("packages: [squid]"), "{text}");
    let stand_in = placeholder(CLOUD_INIT);
    let digest: String = Sha256::digest(CLOUD_INIT.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(stand_in, format!("sha256:{digest}"));
    // Resolved content, inline spec, and the create request all carry the placeholder.
    assert_eq!(text.matches(&stand_in).count(), 2 + 2 + 1, "{text}");

    let recording = Recording::parse(&text).unwrap();
    // The create writes the hash before its call (the first record).
    let Record::Decide(outcome) = &recording.records()[0] else {
        panic!("a decide record");
    };
    // The real spec hash: the recording says what was written to the object.
    let real = testing::hash();
    assert_eq!(
        outcome.redaction.as_ref().unwrap().spec_hash.as_deref(),
        Some(real.as_str())
    );
    assert!(matches!(
        &outcome.output.actions()[0],
        proxy_core::Action::SetSpecHash { hash } if *hash == real
    ));
    let report = replay(&text).unwrap();
    assert!(report.is_identical(), "{:?}", report.divergence);
    assert_eq!((report.checked, report.records), (3, 3));
    assert!(report.notes.is_empty());

    // Why the real hash is kept: without it, the redacted input hashes to another value
    // than the one the recorded output wrote.
    let stripped = edit_json(&text, 2, |r| {
        r.as_object_mut().unwrap().remove("redaction");
    });
    let divergence = replay(&stripped).unwrap().divergence.unwrap();
    assert_eq!(divergence.path, "/actions/0/SetSpecHash/hash");
}

#[test]
fn redacted_records_replay_every_hash_situation() {
    let spec = managed_spec();
    let running = InstanceView::Running {
        ip: "10.0.0.7".to_owned(),
    };
    let status = testing::status_of(
        proxy_crd::Phase::Provisioning,
        Some(ID),
        None,
        1,
        [
            ("False", "Provisioning", "m", T0),
            ("Unknown", "NoAddress", "m", T0),
            ("False", "NotProvisioned", "m", T0),
        ],
    );
    let situations = [
        ("matches", Observed::test().annotated(testing::hash())),
        ("differs", Observed::test().annotated("an-older-hash")),
        ("missing", Observed::test()),
        ("empty", Observed::test().annotated("")),
    ];
    for (name, observed) in situations {
        let observed = observed.instance(running.clone());
        let mut recording = Recording::new(header());
        let real = call(&mut recording, &spec, &status, &observed);
        let text = recording.to_jsonl().unwrap();
        assert!(!text.contains(CLOUD_INIT), "{name}");
        let Record::Decide(record) = &recording.records()[0] else {
            panic!()
        };
        // The recorded output is the real one: here nothing in it carries the content.
        assert_eq!(record.output, real, "{name}");
        let report = replay(&text).unwrap();
        assert!(
            report.is_identical(),
            "{name}: {}",
            report.divergence.unwrap()
        );
    }
}

#[test]
fn a_redacted_recording_still_shows_a_changed_rule() {
    let text = sample().to_jsonl().unwrap();
    let report = replay_with(
        &text,
        |spec: &ProxySpec, status: &ProxyStatus, observed: &Observed| {
            tweak(decide(spec, status, observed), |v| {
                v["actions"]
                    .as_array_mut()
                    .unwrap()
                    .retain(|a| a.get("SetSpecHash").is_none());
            })
        },
    )
    .unwrap();
    let divergence = report.divergence.unwrap();
    assert_eq!(
        (divergence.index, divergence.line, divergence.seq),
        (0, 2, 1)
    );
    assert_eq!(divergence.path, "/actions/0");
    assert_eq!(divergence.object, "crawl/px-1");
    assert_eq!(report.checked, 1);
    assert!(divergence.recorded.contains(&testing::hash()));
    assert!(!divergence.replayed.contains(&testing::hash()));
    let shown = divergence.to_string();
    assert!(
        shown.starts_with(
            "line 2 (seq 1), decide crawl/px-1 at 2026-01-01T00:00:00Z: the output differs at \
             /actions/0\nrecorded:\n{\n"
        ),
        "{shown}"
    );
    assert!(shown.contains("\nreplayed:\n{\n"), "{shown}");
}

#[test]
fn a_rule_that_changes_the_user_data_diverges_without_showing_it() {
    let text = sample().to_jsonl().unwrap();
    let changed = "#cloud-config\n# written by a changed rule\n";
    let report = replay_with(
        &text,
        |spec: &ProxySpec, status: &ProxyStatus, observed: &Observed| {
            tweak(decide(spec, status, observed), |v| {
                for action in v["actions"].as_array_mut().unwrap() {
                    if let Some(create) = action.get_mut("Create") {
                        create["cloudInit"] = Value::from(changed);
                    }
                }
            })
        },
    )
    .unwrap();
    let divergence = report.divergence.unwrap();
    assert_eq!(
        (divergence.line, divergence.path.as_str()),
        (2, "/actions/1/Create/cloudInit")
    );
    // Replay redacts its own output by type too: the changed content shows as its placeholder.
    assert!(divergence.recorded.contains(&placeholder(CLOUD_INIT)));
    assert!(divergence.replayed.contains(&placeholder(changed)));
    assert!(!divergence.to_string().contains("changed rule"));
}

#[test]
fn redaction_is_idempotent_and_leaves_records_without_content_alone() {
    let spec = managed_spec();
    let observed = Observed::test();
    let decision = decide(&spec, &ProxyStatus::default(), &observed);
    let mut record = DecideRecord::new(&spec, &ProxyStatus::default(), &observed, &decision);
    let once = record.clone();
    record.redact();
    assert_eq!(record, once);

    // No cloud-init at all: nothing to redact, nothing to map.
    let bare = ProxySpec {
        cloud_init: None,
        ..managed_spec()
    };
    let observed = Observed::test().cloud_init(CloudInitView::NotSet);
    let decision = decide(&bare, &ProxyStatus::default(), &observed);
    let record = DecideRecord::new(&bare, &ProxyStatus::default(), &observed, &decision);
    assert_eq!(record.redaction, None);
    assert_eq!(record.output, decision);

    // A missing Secret: only the inline copy is there to redact, and no hash to map.
    let observed = Observed::test().cloud_init(CloudInitView::Unavailable {
        message: "secret crawl/user-data not found".to_owned(),
    });
    let decision = decide(&spec, &ProxyStatus::default(), &observed);
    let record = DecideRecord::new(&spec, &ProxyStatus::default(), &observed, &decision);
    let redaction = record.redaction.clone().unwrap();
    assert_eq!(redaction.spec_hash, None);
    let inline = record
        .input
        .spec
        .cloud_init
        .as_ref()
        .unwrap()
        .inline
        .clone();
    assert_eq!(inline, Some(placeholder(CLOUD_INIT)));
    let mut recording = Recording::new(header());
    recording.push(Record::from(record));
    assert!(
        replay(&recording.to_jsonl().unwrap())
            .unwrap()
            .is_identical()
    );

    // Content that happens to equal another output string (here the provider's name) is
    // redacted where it is cloud-init, and only there: the provider's name is no secret.
    let observed = Observed::test().cloud_init(CloudInitView::Resolved {
        content: testing::PROVIDER.to_owned(),
    });
    let mut recording = Recording::new(header());
    let decision = call(&mut recording, &spec, &ProxyStatus::default(), &observed);
    let Record::Decide(record) = &recording.records()[0] else {
        panic!()
    };
    let proxy_core::Action::Create(request) = &record.output.actions()[1] else {
        panic!("{decision:?}")
    };
    assert_eq!(request.provider, testing::PROVIDER);
    assert_eq!(request.cloud_init, Some(placeholder(testing::PROVIDER)));
    assert!(
        replay(&recording.to_jsonl().unwrap())
            .unwrap()
            .is_identical()
    );
}

#[test]
fn unredacted_records_replay_too_and_push_redacts_them() {
    let spec = managed_spec();
    let observed = Observed::test();
    let decision = decide(&spec, &ProxyStatus::default(), &observed);
    let mut record = DecideRecord::new(&spec, &ProxyStatus::default(), &observed, &decision);
    record.seq = 1;
    // Undo the redaction: a file written by hand, or by a recorder that did not redact.
    record.input = proxy_core::record::DecideInput {
        spec: spec.clone(),
        status: ProxyStatus::default(),
        observed: observed.clone(),
    };
    record.output = decision.clone();
    record.redaction = None;
    let header_line = Recording::new(header()).to_jsonl().unwrap();
    let text = format!(
        "{header_line}{}\n",
        serde_json::to_string(&Record::from(record.clone())).unwrap()
    );
    assert!(text.contains("packages: [squid]"));
    let report = replay(&text).unwrap();
    assert!(report.is_identical(), "{}", report.divergence.unwrap());

    let mut recording = Recording::new(header());
    recording.push(Record::from(record));
    assert!(!recording.to_jsonl().unwrap().contains("packages: [squid]"));
}

// ---- Health records ------------------------------------------------------------------------

/// What the driver does next to a proxy's health state.
#[derive(Clone, Copy, Debug)]
enum Step {
    Ok,
    Fail,
    /// Deliver the last report, if it was not delivered yet.
    Deliver,
}

#[test]
fn every_reachable_health_state_replays_alone_and_in_sequence() {
    let key = ProxyKey::new("crawl", "px-1");
    let steps = [Step::Ok, Step::Fail, Step::Deliver];
    let mut sequences: Vec<Vec<Step>> = vec![Vec::new()];
    for _ in 0..5 {
        let longer: Vec<Vec<Step>> = sequences
            .iter()
            .filter(|s| s.len() == sequences.last().unwrap().len())
            .flat_map(|s| {
                steps.iter().map(move |step| {
                    let mut s = s.clone();
                    s.push(*step);
                    s
                })
            })
            .collect();
        sequences.extend(longer);
    }
    let thresholds = [(1, 1), (2, 2), (3, 1), (1, 3)];
    let starts = [None, Some(true), Some(false)];
    let mut replayed = 0;
    for sequence in &sequences {
        for (failure, success) in thresholds {
            for start in starts {
                let check = HealthCheck {
                    failure_threshold: failure,
                    success_threshold: success,
                    ..HealthCheck::default()
                };
                let mut book = HealthBook::new();
                if let Some(healthy) = start {
                    // A leader handover: seeded from status.
                    book.seed(
                        &key,
                        testing::UID,
                        None,
                        proxy_core::HealthVerdict {
                            host: "10.0.0.7".to_owned(),
                            healthy,
                            latency_ms: 30,
                            probed_at: at(T0),
                            failure: None,
                            egress_ip: None,
                        },
                    );
                }
                let mut whole = Recording::new(header());
                let mut last = None;
                let mut time = at(T0);
                for (i, step) in sequence.iter().enumerate() {
                    time = time
                        .checked_add(jiff::SignedDuration::from_secs(61))
                        .unwrap();
                    let ok = match step {
                        Step::Ok => true,
                        Step::Fail => false,
                        Step::Deliver => {
                            if let Some(report) = last.take() {
                                assert!(book.delivered(&report));
                            }
                            continue;
                        }
                    };
                    // A latency that moves and stays makes latency runs and reports too.
                    let latency_ms = if i == 0 { 10 } else { 200 };
                    let probe = Probe {
                        ok,
                        latency_ms,
                        at: time,
                        failure: None,
                        egress: None,
                    };
                    let (report, record) =
                        HealthRecord::call(&mut book, &key, &target("10.0.0.7"), probe, &check);
                    let record = record.expect("the book keeps the state it recorded");
                    last = report.or(last);
                    // Alone: the state before it is rebuilt from scratch.
                    let mut alone = Recording::new(header());
                    alone.push(Record::from(record.clone()));
                    let report = alone
                        .replay()
                        .unwrap_or_else(|e| panic!("{sequence:?} {failure}/{success}: {e}"));
                    assert!(
                        report.is_identical(),
                        "{sequence:?} {failure}/{success} {start:?}: {}",
                        report.divergence.unwrap()
                    );
                    whole.push(Record::from(record));
                    replayed += 1;
                }
                let report = whole.replay().unwrap();
                assert!(
                    report.is_identical(),
                    "{sequence:?}: {}",
                    report.divergence.unwrap()
                );
            }
        }
    }
    assert!(replayed > 10_000, "{replayed}");
}

#[test]
fn an_unreachable_health_state_is_an_error_not_a_divergence() {
    let text = sample().to_jsonl().unwrap();
    let text = edit_json(&text, 4, |r| {
        r["input"]["state"] = serde_json::json!({
            "target": {"uid": testing::UID, "host": "10.0.0.7"},
            "successes": 2,
            "failures": 1,
            "verdict": true,
            "reported": null,
        });
    });
    let error = replay(&text).unwrap_err();
    let ReplayError::Unreproducible { line, seq, message } = &error else {
        panic!("{error:?}");
    };
    assert_eq!((*line, *seq), (4, 3));
    assert!(message.contains("both successes and failures"), "{message}");
    assert!(
        error
            .to_string()
            .starts_with("line 4 (seq 3): cannot replay: ")
    );
}

#[test]
fn a_changed_health_output_diverges() {
    let text = sample().to_jsonl().unwrap();
    // As if the recording build had not reported the first probe.
    let text = edit_json(&text, 4, |r| r["output"]["report"] = Value::Null);
    let divergence = replay(&text).unwrap().divergence.unwrap();
    assert_eq!((divergence.index, divergence.kind), (2, "health"));
    assert_eq!(divergence.path, "/report");
}

// ---- Header and timeline -------------------------------------------------------------------

#[test]
fn a_configuration_that_differs_from_this_build_is_noted() {
    let text = edit_json(&sample().to_jsonl().unwrap(), 1, |h| {
        h["config"]["latencyFloorMs"] = 10.into();
    });
    let report = replay(&text).unwrap();
    assert!(report.is_identical());
    assert_eq!(
        report.notes,
        ["recorded with a health latency floor of 10 ms, this build uses 20 ms"]
    );
    assert_eq!(report.header.operator.commit, "abc1234");
}

#[test]
fn the_timeline_has_one_short_line_per_record() {
    let lines = timeline(&sample());
    let hash = testing::hash();
    assert_eq!(
        lines,
        [
            "recorded 2026-01-01T00:00:00Z by operator 0.1.0 (commit abc1234), schema 1; \
             providers: pods; polls: provisioning 10s, drift 1m, deletion 10s, soon 1s, quota \
             retry 5m",
            &format!(
                "2026-01-01T00:00:00Z crawl/px-1  observed: no instance  decided: SetSpecHash \
                 {}, Create proxy-kbqzhquppopaia3n, PatchStatus(Provisioning), Event Creating  \
                 requeue 10s",
                &hash[..12]
            ),
            "2026-01-01T00:00:00Z crawl/px-1  observed: create succeeded: \
             crawl/proxy-kbqzhquppopaia3n  decided: PatchStatus(Provisioning), Event \
             Provisioning  requeue 10s",
            "2026-01-01T00:00:30Z crawl/px-1  probe: ok 42 ms at 10.0.0.7  health: healthy, 1 \
             ok in a row (thresholds: 3 failed, 1 ok)  report First: healthy",
        ]
    );
    let running = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Running {
            ip: "10.0.0.7".to_owned(),
        })
        .health("10.0.0.7", true);
    let mut recording = Recording::new(header());
    let status = ProxyStatus {
        provider_id: Some(ID.to_owned()),
        ..ProxyStatus::default()
    };
    let _ = call(&mut recording, &managed_spec(), &status, &running);
    assert_eq!(
        timeline(&recording)[1],
        "2026-01-01T00:00:00Z crawl/px-1  observed: instance Running 10.0.0.7, hash matches, \
         healthy 42 ms at 10.0.0.7  decided: PatchStatus(Ready), Event Created, Event \
         ProbeSucceeded  requeue 1m"
    );
}
