//! The recorder: every `decide` call with its full input and output, for replaying an
//! incident through the core (`proxy-operator replay FILE`, `docs/replay.md`).
//!
//! Records are kept in memory as their serialized lines, compressed (module `packing`: LZ4
//! against a dictionary of recent lines, about a seventh of their size): a ring per object
//! (the last `--record-per-object` calls of each Proxy) under one byte budget for the whole
//! fleet (`--record-budget-bytes`, the compressed lines, what keeping each costs besides,
//! and their dictionaries: past it the
//! oldest records go first, whichever Proxy they are about), so memory stays flat however
//! many Proxies there are and however long the operator runs. A budget of 0 keeps none. The metrics port streams them (`GET /debug/recording`, optionally
//! `?object=namespace/name` and `&since=<RFC 3339 time>`) without building the dump in
//! memory: each line is unpacked as it is sent. With `--record-file` every record is also appended to a file that rotates at a
//! size limit (one previous file kept as `<file>.1`). Cloud-init content never reaches
//! either: the core's `DecideRecord::new` replaces it by its SHA-256 when the record is made.
//!
//! Recording never stops the reconcile it records: a record that cannot be serialized is
//! logged and dropped, a full disk closes the file, and a lock poisoned by a panic elsewhere
//! is taken over (nothing under the lock can panic: it only moves kept lines and counts
//! them). A record is serialized before the lock is taken; it is compressed under it (the
//! dictionary changes with the lines), and the file append (when configured) writes under
//! it, so that the file keeps the order of the sequence numbers.
//!
//! Recording costs a serialization and a compression per decide call; `bench-record`
//! measures them against the decide call itself (`docs/benchmarks.md`).

mod flags;
pub mod http;
mod packing;

pub use self::flags::Flags;

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use jiff::Timestamp;
use proxy_core::record::{Header, Record};
use proxy_core::{ObjectKey, ProxyKey};

use self::packing::{Packed, Packer, Unpackable};

/// Where recorded lines go besides the ring buffers.
#[derive(Debug)]
struct FileSink {
    path: PathBuf,
    max_bytes: u64,
    file: std::fs::File,
    written: u64,
}

impl FileSink {
    fn open(path: PathBuf, max_bytes: u64, header: &Header) -> std::io::Result<Self> {
        let line = format!("{}\n", header.to_line()?);
        let mut file = std::fs::File::create(&path)?;
        file.write_all(line.as_bytes())?;
        Ok(Self {
            path,
            max_bytes,
            file,
            written: line.len() as u64,
        })
    }

    /// Appends a line; past the size limit, the file moves to `<file>.1` and a new one starts
    /// with the header, so each file replays on its own.
    fn append(&mut self, line: &str, header: &Header) -> std::io::Result<()> {
        if self.written + line.len() as u64 + 1 > self.max_bytes {
            let rotated = self.path.with_extension(format!(
                "{}.1",
                self.path
                    .extension()
                    .and_then(|e| e.to_str())
                    .unwrap_or("jsonl")
            ));
            std::fs::rename(&self.path, rotated)?;
            *self = Self::open(self.path.clone(), self.max_bytes, header)?;
        }
        self.file.write_all(line.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.written += line.len() as u64 + 1;
        Ok(())
    }
}

/// Whose calls a ring holds: a Proxy's (`decide` and health) or a ProxyPool's
/// (`decide_pool`). A Proxy and a ProxyPool may share a name: they get two rings, so that
/// neither's records push the other's out of a ring, and a deleted Proxy's forget keeps its
/// namesake pool's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Of {
    Proxy,
    Pool,
}

/// A ring's key: the object's `namespace/name`, and its kind.
type RingKey = (ObjectKey, Of);

/// The ring `record` goes to.
fn ring_of(record: &Record) -> RingKey {
    let of = match record {
        Record::Pool(_) => Of::Pool,
        Record::Decide(_) | Record::Health(_) => Of::Proxy,
    };
    (record.object(), of)
}

/// One record as it is kept: its line (with the newline, packed), and what a dump filters on.
#[derive(Debug, Clone)]
struct Kept {
    seq: u64,
    at: Timestamp,
    line: Packed,
}

/// What keeping a record costs besides its packed line: its entry in its ring, its entries
/// in the eviction queue (up to two before a sweep), and the allocator's share of its line.
/// At about 250 bytes a packed line, this is nearly as much again, so the budget counts it.
const KEPT_OVERHEAD: usize =
    size_of::<Kept>() + 2 * size_of::<(u64, RingKey)>() + 2 * size_of::<usize>();

impl Kept {
    /// The bytes the record counts against the budget.
    fn cost(&self) -> usize {
        self.line.len() + KEPT_OVERHEAD
    }
}

#[derive(Debug)]
struct Inner {
    rings: BTreeMap<RingKey, VecDeque<Kept>>,
    /// Every record still in a ring, and some already gone (dropped by the per-object cap
    /// or a forget), oldest first: what the byte budget evicts from. Gone entries are
    /// skipped, and swept once they outnumber the kept ones.
    by_age: VecDeque<(u64, RingKey)>,
    /// How many records the rings hold, and their packed bytes with what keeping each costs.
    kept: usize,
    bytes: usize,
    /// The dictionaries the packed lines need.
    packer: Packer,
    file: Option<FileSink>,
    /// The file's lines in sequence order: records are numbered before they are
    /// serialized, outside the lock, so two reconciles may arrive here out of order. A line
    /// waits in `unwritten` until every earlier number has arrived (or was dropped: `None`).
    next_in_file: u64,
    unwritten: BTreeMap<u64, Option<String>>,
}

impl Inner {
    /// Hands the line of record `seq` (`None`: dropped) to the file, and appends every
    /// line whose turn has come, in sequence order.
    fn write_in_order(&mut self, seq: u64, line: Option<String>, header: &Header) {
        if self.file.is_none() {
            return;
        }
        self.unwritten.insert(seq, line);
        while let Some(line) = self.unwritten.remove(&self.next_in_file) {
            self.next_in_file += 1;
            let Some(line) = line else { continue };
            if let Some(file) = self.file.as_mut()
                && let Err(error) = file.append(&line, header)
            {
                // A full disk must not stop the operator: keep recording in memory.
                tracing::error!(%error, "recording to the file failed; the file is closed");
                self.file = None;
                self.unwritten.clear();
                return;
            }
        }
    }
}

impl Inner {
    /// Drops record `seq` from `key`'s ring, if it is still there. Rings are in sequence
    /// order (one object is never reconciled twice at once), so it is found by bisection.
    fn drop_record(&mut self, key: &RingKey, seq: u64) {
        let Some(ring) = self.rings.get_mut(key) else {
            return;
        };
        if let Ok(at) = ring.binary_search_by_key(&seq, |kept| kept.seq)
            && let Some(kept) = ring.remove(at)
        {
            self.release(&kept);
        }
    }

    /// Counts a record that left its ring out.
    fn release(&mut self, kept: &Kept) {
        self.kept -= 1;
        self.bytes -= kept.cost();
        self.packer.release(&kept.line);
    }

    /// The bytes the kept records hold: their packed lines and the dictionaries.
    fn held(&self) -> usize {
        self.bytes + self.packer.bytes()
    }

    /// Drops the oldest records of the fleet until the rest fit `budget`.
    fn fit(&mut self, budget: usize) {
        while self.held() > budget {
            let Some((seq, key)) = self.by_age.pop_front() else {
                return;
            };
            self.drop_record(&key, seq);
        }
        if self.by_age.len() > 2 * self.kept + 64 {
            let rings = &self.rings;
            self.by_age.retain(|(seq, key)| {
                rings
                    .get(key)
                    .is_some_and(|ring| ring.binary_search_by_key(seq, |kept| kept.seq).is_ok())
            });
        }
    }
}

/// Records the core's decisions of one operator process.
#[derive(Debug)]
pub struct Recorder {
    header: Bytes,
    file_header: Header,
    per_object: usize,
    budget: usize,
    next_seq: AtomicU64,
    inner: Mutex<Inner>,
}

/// What the recorder keeps in memory: `line_bytes` and `dictionary_bytes` together stay
/// within its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The records kept.
    pub records: usize,
    /// Their packed lines, and what keeping each costs besides.
    pub line_bytes: usize,
    /// The dictionaries the lines are packed against, and the lines the next one is made of.
    pub dictionary_bytes: usize,
}

/// What a dump holds: every record (of one object, or all) made at or after a time.
#[derive(Debug, Default)]
pub struct Filter {
    /// Only the records of the objects of this `namespace/name`: a Proxy's and a pool's of
    /// that name both (each record says which it is about).
    pub object: Option<ObjectKey>,
    /// Only records whose call happened at or after this time.
    pub since: Option<Timestamp>,
}

impl Recorder {
    /// A recorder keeping the last `per_object` records of each object within `budget`
    /// bytes for all of them, and appending every record to `file` when given (rotating at
    /// its size).
    pub fn new(
        header: Header,
        per_object: usize,
        budget: usize,
        file: Option<(PathBuf, u64)>,
    ) -> std::io::Result<Self> {
        let file = file
            .map(|(path, max_bytes)| FileSink::open(path, max_bytes, &header))
            .transpose()?;
        Ok(Self {
            header: Bytes::from(format!("{}\n", header.to_line()?)),
            file_header: header,
            per_object: per_object.max(1),
            budget,
            next_seq: AtomicU64::new(1),
            inner: Mutex::new(Inner {
                rings: BTreeMap::new(),
                by_age: VecDeque::new(),
                kept: 0,
                bytes: 0,
                packer: Packer::default(),
                file,
                next_in_file: 1,
                unwritten: BTreeMap::new(),
            }),
        })
    }

    /// Records one `decide` (or `decide_pool`) call, in the ring of the object it was about.
    pub fn decide(&self, record: impl Into<Record>) {
        let mut record: Record = record.into();
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        record.set_seq(seq);
        let mut line = match record.to_line() {
            Ok(line) => line,
            Err(error) => {
                tracing::error!(object = %record.object(), %error, "a {} record does not serialize: dropped", record.kind());
                self.lock().write_in_order(seq, None, &self.file_header);
                return;
            }
        };
        let mut inner = self.lock();
        if inner.file.is_some() {
            inner.write_in_order(seq, Some(line.clone()), &self.file_header);
        }
        if self.budget == 0 {
            return;
        }
        line.push('\n');
        // The ring's own key when it has one: the eviction queue shares it rather than
        // keeping a copy per record.
        let ring = ring_of(&record);
        let key = match inner.rings.get_key_value(&ring) {
            Some((key, _)) => key.clone(),
            None => ring,
        };
        let kept = Kept {
            seq,
            at: record.at(),
            line: inner.packer.pack(record.kind(), Bytes::from(line)),
        };
        inner.kept += 1;
        inner.bytes += kept.cost();
        // The per-object cap first, so a ring never holds more than it.
        let full = inner
            .rings
            .get(&key)
            .filter(|ring| ring.len() >= self.per_object)
            .and_then(|ring| ring.front().map(|oldest| oldest.seq));
        if let Some(oldest) = full {
            inner.drop_record(&key, oldest);
        }
        let ring = inner.rings.entry(key.clone()).or_default();
        let place = ring.partition_point(|other| other.seq < seq);
        ring.insert(place, kept);
        inner.by_age.push_back((seq, key));
        inner.fit(self.budget);
    }

    /// What the rings hold now.
    pub fn usage(&self) -> Usage {
        let inner = self.lock();
        Usage {
            records: inner.kept,
            line_bytes: inner.bytes,
            dictionary_bytes: inner.packer.bytes(),
        }
    }

    /// The state, also after a panic while it was held.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::locks::lock(&self.inner)
    }

    /// The kept records that pass `filter` as a recording, the header first and the records
    /// in the order they were made: what `proxy-operator replay` reads. The packed lines are
    /// shared with the rings, not copied, and unpacked one at a time as the dump is read; the
    /// lock is held only while they are picked, so a dump of the whole fleet costs neither
    /// the memory of a copy nor a stall of the reconciles.
    pub fn dump(&self, filter: &Filter) -> Dump {
        let mut records: Vec<(u64, Unpackable)> = {
            let inner = self.lock();
            inner
                .rings
                .iter()
                .filter(|((object, _), _)| filter.object.as_ref().is_none_or(|o| o == object))
                .flat_map(|(_, ring)| ring.iter())
                .filter(|kept| filter.since.is_none_or(|since| kept.at >= since))
                .filter_map(|kept| Some((kept.seq, inner.packer.unpackable(&kept.line)?)))
                .collect()
        };
        records.sort_unstable_by_key(|(seq, _)| *seq);
        Dump {
            header: Some(self.header.clone()),
            records: records.into_iter(),
        }
    }
}

/// A recording being read: the header, then the records, each unpacked as it comes.
#[derive(Debug)]
pub struct Dump {
    header: Option<Bytes>,
    records: std::vec::IntoIter<(u64, Unpackable)>,
}

impl Iterator for Dump {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if let Some(header) = self.header.take() {
            return Some(header);
        }
        loop {
            let (seq, record) = self.records.next()?;
            match record.unpack() {
                Ok(line) => return Some(line),
                // Cannot happen to a block the packer made; a dump goes on without it.
                Err(error) => {
                    tracing::error!(seq, %error, "a kept record does not unpack: left out")
                }
            }
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct PartLabels {
    part: &'static str,
}

/// `proxy_operator_recording_records` and `proxy_operator_recording_bytes{part}`: what the
/// recorder holds against `--record-budget-bytes`.
impl crate::runtime::metrics::Gauges for Recorder {
    fn encode(&self, encoder: &mut crate::runtime::metrics::DescriptorEncoder) -> std::fmt::Result {
        let usage = self.usage();
        crate::runtime::metrics::gauge(
            encoder,
            "recording_records",
            "Decide calls the recorder keeps in memory, for GET /debug/recording",
            usage.records,
        )?;
        crate::runtime::metrics::gauges(
            encoder,
            "recording_bytes",
            "Bytes the recorder keeps in memory within --record-budget-bytes: the compressed records with what keeping each costs (lines) and the dictionaries they are compressed against",
            [
                (PartLabels { part: "lines" }, usage.line_bytes),
                (
                    PartLabels {
                        part: "dictionaries",
                    },
                    usage.dictionary_bytes,
                ),
            ],
        )
    }
}

impl crate::per_proxy::PerProxy for Recorder {
    /// Forgets an object that is gone.
    fn forget(&self, object: &ProxyKey) {
        let mut inner = self.lock();
        if let Some(ring) = inner.rings.remove(&(object.to_object(), Of::Proxy)) {
            for kept in &ring {
                inner.release(kept);
            }
        }
    }

    /// How many objects have a ring.
    fn tracked(&self) -> usize {
        self.lock().rings.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::per_proxy::PerProxy;
    use proxy_core::record::DecideRecord;
    use proxy_core::testing::managed_spec;
    use proxy_core::{Observed, decide};
    use proxy_crd::ProxyStatus;

    use super::*;

    /// A dump as the text `GET /debug/recording` sends.
    fn text(recorder: &Recorder, object: Option<&str>) -> String {
        let filter = Filter {
            object: object.map(|name| ObjectKey::new("ns", name)),
            since: None,
        };
        let lines: Vec<Bytes> = recorder.dump(&filter).collect();
        String::from_utf8(lines.concat()).unwrap()
    }

    fn header() -> Header {
        proxy_core::record::Header::new(
            proxy_core::record::Operator {
                version: "test".into(),
                commit: "test".into(),
            },
            proxy_core::record::Config::new(proxy_core::Timing::default(), ["pods".to_owned()]),
            jiff::Timestamp::UNIX_EPOCH,
        )
    }

    #[test]
    fn rings_are_bounded_per_object_and_dumps_replay() {
        let recorder = Recorder::new(header(), 2, usize::MAX, None).unwrap();
        let spec = managed_spec();
        let status = ProxyStatus::default();
        for name in ["a", "a", "a", "b"] {
            let mut observed = Observed::test();
            observed.object.namespace = "ns".into();
            observed.object.name = name.into();
            let decision = decide(&spec, &status, &observed);
            recorder.decide(DecideRecord::new(&spec, &status, &observed, &decision));
        }
        let dump = text(&recorder, None);
        assert_eq!(dump.lines().count(), 1 + 2 + 1, "{dump}");
        let report = proxy_core::record::replay(&dump).unwrap();
        assert!(report.is_identical(), "{:?}", report.divergence);
        let only_b = text(&recorder, Some("b"));
        assert_eq!(only_b.lines().count(), 2);
        assert!(
            only_b
                .lines()
                .nth(1)
                .unwrap()
                .contains(r#""object":"ns/b""#)
        );
        recorder.forget(&ProxyKey::new("ns", "a"));
        assert_eq!(text(&recorder, None).lines().count(), 2, "a's ring is gone");
    }

    #[test]
    fn a_lock_poisoned_by_a_panic_does_not_stop_recording() {
        let recorder = Recorder::new(header(), 2, usize::MAX, None).unwrap();
        std::thread::scope(|s| {
            let held = s.spawn(|| {
                let _guard = recorder.inner.lock();
                panic!("a panic while the recorder is locked");
            });
            assert!(held.join().is_err());
        });
        assert!(recorder.inner.is_poisoned());
        let spec = managed_spec();
        let status = ProxyStatus::default();
        let observed = Observed::test();
        let decision = decide(&spec, &status, &observed);
        recorder.decide(DecideRecord::new(&spec, &status, &observed, &decision));
        recorder.forget(&ProxyKey::new("ns", "b"));
        let dump = text(&recorder, None);
        assert_eq!(dump.lines().count(), 2, "{dump}");
        assert!(proxy_core::record::replay(&dump).unwrap().is_identical());
    }

    #[test]
    fn the_file_keeps_sequence_order_when_records_arrive_out_of_it() {
        let dir = std::env::temp_dir().join(format!("recorder-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("decisions.jsonl");
        let recorder =
            Recorder::new(header(), 8, usize::MAX, Some((path.clone(), 1 << 20))).unwrap();
        // Numbered 1, 2, 3, 4 before they were serialized; they reach the lock as 2, 4, 1,
        // and 3 is dropped (it did not serialize).
        for (seq, line) in [
            (2, Some("two")),
            (4, Some("four")),
            (1, Some("one")),
            (3, None),
        ] {
            recorder
                .lock()
                .write_in_order(seq, line.map(str::to_owned), &recorder.file_header);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines, ["one", "two", "four"]);
        assert!(recorder.lock().unwritten.is_empty(), "nothing left waiting");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_file_rotates_and_each_file_replays_on_its_own() {
        let dir = std::env::temp_dir().join(format!("recorder-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("decisions.jsonl");
        let spec = managed_spec();
        let status = ProxyStatus::default();
        let observed = Observed::test();
        let decision = decide(&spec, &status, &observed);
        let one_record = Record::from(DecideRecord::new(&spec, &status, &observed, &decision))
            .to_line()
            .unwrap()
            .len() as u64;
        // Room for the header and about three records per file.
        let max = header().to_line().unwrap().len() as u64 + 1 + 3 * (one_record + 1) + 10;
        let recorder = Recorder::new(header(), 8, usize::MAX, Some((path.clone(), max))).unwrap();
        for _ in 0..5 {
            recorder.decide(DecideRecord::new(&spec, &status, &observed, &decision));
        }
        let rotated = dir.join("decisions.jsonl.1");
        for file in [&path, &rotated] {
            let text = std::fs::read_to_string(file).unwrap();
            assert!(
                std::fs::metadata(file).unwrap().len() <= max,
                "{} is over the limit",
                file.display()
            );
            let report = proxy_core::record::replay(&text).unwrap();
            assert!(
                report.is_identical() && report.records >= 1,
                "{}: {report:?}",
                file.display()
            );
        }
        let total: usize = [&path, &rotated]
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap().lines().count() - 1)
            .sum();
        assert_eq!(total, 5, "every record is in one of the two files");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Records `count` decide calls about each of `names`, in turn, `step` seconds apart.
    fn record(recorder: &Recorder, names: &[&str], count: usize, step: i64) {
        let spec = managed_spec();
        let status = ProxyStatus::default();
        for i in 0..count {
            for name in names {
                let mut observed = Observed::test();
                observed.object.namespace = "ns".into();
                observed.object.name = (*name).into();
                observed.now =
                    jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(step * i as i64);
                let decision = decide(&spec, &status, &observed);
                recorder.decide(DecideRecord::new(&spec, &status, &observed, &decision));
            }
        }
    }

    #[test]
    fn the_fleet_budget_keeps_the_newest_records_of_every_proxy_within_it() {
        let names = ["a", "b", "c", "d", "e"];
        // Packing depends only on the lines, so a recorder without a budget packs the same
        // sequence to the same sizes.
        let unbounded = Recorder::new(header(), 64, usize::MAX, None).unwrap();
        record(&unbounded, &names, 20, 1);
        let Usage {
            line_bytes: lines,
            dictionary_bytes: dictionaries,
            ..
        } = unbounded.usage();
        let held = lines + dictionaries;
        // Room for the dictionaries and about half the lines.
        let budget = held - lines / 2;
        let recorder = Recorder::new(header(), 64, budget, None).unwrap();
        record(&recorder, &names, 20, 1);
        let usage = recorder.usage();
        let held = usage.line_bytes + usage.dictionary_bytes;
        assert!(held <= budget, "{held} > {budget}");
        let dump = text(&recorder, None);
        let report = proxy_core::record::replay(&dump).unwrap();
        assert!(report.is_identical(), "{:?}", report.divergence);
        let seqs: Vec<u64> = dump
            .lines()
            .skip(1)
            .map(|line| {
                serde_json::from_str::<serde_json::Value>(line).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        let first = 101 - seqs.len() as u64;
        assert_eq!(seqs, (first..=100).collect::<Vec<_>>(), "oldest first out");
        assert!(
            (40..100).contains(&seqs.len()),
            "about half the records fit: {}",
            seqs.len()
        );
        // Forgetting gives the bytes back.
        for name in names {
            recorder.forget(&ProxyKey::new("ns", name));
        }
        assert_eq!(recorder.usage().line_bytes, 0);
        assert_eq!(recorder.usage().records, 0);
    }

    #[test]
    fn packed_records_take_a_fraction_of_their_lines() {
        let recorder = Recorder::new(header(), 64, usize::MAX, None).unwrap();
        record(&recorder, &["a", "b", "c", "d", "e"], 200, 1);
        let usage = recorder.usage();
        assert!(
            usage.line_bytes > usage.records * KEPT_OVERHEAD,
            "the budget counts what keeping a record costs besides its line"
        );
        let packed = usage.line_bytes - usage.records * KEPT_OVERHEAD;
        let plain = text(&recorder, None).len() - header().to_line().unwrap().len() - 1;
        assert!(
            4 * packed < plain,
            "{packed} bytes packed for {plain} bytes of lines"
        );
    }

    #[test]
    fn a_budget_of_zero_keeps_nothing() {
        let recorder = Recorder::new(header(), 64, 0, None).unwrap();
        record(&recorder, &["a"], 3, 1);
        let nothing = Usage {
            records: 0,
            line_bytes: 0,
            dictionary_bytes: 0,
        };
        assert_eq!(recorder.usage(), nothing);
        assert_eq!(text(&recorder, None).lines().count(), 1, "the header only");
    }

    #[test]
    fn the_eviction_queue_stays_proportional_to_what_is_kept() {
        let recorder = Recorder::new(header(), 2, usize::MAX, None).unwrap();
        record(&recorder, &["a", "b"], 2_000, 1);
        let inner = recorder.lock();
        assert_eq!(inner.kept, 4);
        assert!(
            inner.by_age.len() <= 2 * inner.kept + 64,
            "{} entries for {} records",
            inner.by_age.len(),
            inner.kept
        );
    }

    #[test]
    fn a_dump_filters_by_object_and_time() {
        let recorder = Recorder::new(header(), 64, usize::MAX, None).unwrap();
        record(&recorder, &["a", "b"], 10, 60);
        let since = jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(7 * 60);
        let filter = Filter {
            object: Some(ObjectKey::new("ns", "b")),
            since: Some(since),
        };
        let text = String::from_utf8(recorder.dump(&filter).collect::<Vec<_>>().concat()).unwrap();
        assert_eq!(
            text.lines().count(),
            1 + 3,
            "b's calls at minutes 7, 8 and 9: {text}"
        );
        assert!(
            text.lines()
                .skip(1)
                .all(|line| line.contains(r#""object":"ns/b""#))
        );
        assert!(proxy_core::record::replay(&text).unwrap().is_identical());
    }

    /// A Proxy and a ProxyPool of the same name: two rings, each capped on its own, and the
    /// Proxy's forget leaves the pool's records; a dump by name shows both.
    #[test]
    fn a_proxy_and_a_pool_of_one_name_keep_rings_of_their_own() {
        let recorder = Recorder::new(header(), 2, usize::MAX, None).unwrap();
        let spec: proxy_crd::pool::ProxyPoolSpec = serde_json::from_value(serde_json::json!({
            "template": {"spec": {"mode": "Managed", "provider": "pods"}},
        }))
        .unwrap();
        let status = proxy_crd::pool::ProxyPoolStatus::default();
        let observed = proxy_core::pool::PoolObserved {
            name: "a".into(),
            generation: 1,
            members: Vec::new(),
            demand: None,
            now: jiff::Timestamp::UNIX_EPOCH,
        };
        let decision = proxy_core::decide_pool(&spec, &status, &observed);
        for _ in 0..2 {
            recorder.decide(proxy_core::record::PoolRecord::new(
                proxy_core::PoolKey::new("ns", "a"),
                &spec,
                &status,
                &observed,
                &decision,
            ));
        }
        // Three calls of the Proxy `ns/a`: its ring keeps two, the pool's two stay.
        record(&recorder, &["a"], 3, 60);
        assert_eq!(recorder.tracked(), 2, "two rings");
        assert_eq!(recorder.usage().records, 4);
        assert_eq!(text(&recorder, Some("a")).lines().count(), 1 + 4);
        recorder.forget(&ProxyKey::new("ns", "a"));
        assert_eq!(recorder.usage().records, 2, "the pool's records stay");
        let left = text(&recorder, Some("a"));
        assert!(
            left.lines()
                .skip(1)
                .all(|line| line.contains(r#""kind":"pool""#)),
            "{left}"
        );
    }
}
