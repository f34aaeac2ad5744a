//! The recorder: every `decide` call with its full input and output, for replaying an
//! incident through the core (`proxy-operator replay FILE`, `docs/replay.md`).
//!
//! Records go to a ring buffer per object (the last [`Recorder::capacity`] calls of each
//! Proxy), dumped on demand from the metrics port (`GET /debug/recording`, optionally
//! `?object=namespace/name`), and, with `--record-file`, appended to a file that rotates at
//! a size limit (one previous file kept as `<file>.1`). Cloud-init content never reaches
//! either: the core's `DecideRecord::new` replaces it by its SHA-256 when the record is made.
//!
//! Recording never stops the reconcile it records: a record that cannot be serialized is
//! logged and dropped, a full disk closes the file, and a lock poisoned by a panic elsewhere
//! is taken over (the rings stay consistent: every change to them is a single push or pop).
//!
//! Recording costs a serialization per decide call; `bench-record` measures it against the
//! decide call itself (`docs/benchmarks.md`).

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use proxy_core::ProxyKey;
use proxy_core::record::{DecideRecord, Header, Record, Recording};

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

#[derive(Debug)]
struct Inner {
    next_seq: u64,
    rings: BTreeMap<ProxyKey, VecDeque<Record>>,
    file: Option<FileSink>,
}

/// Records the core's decisions of one operator process.
#[derive(Debug)]
pub struct Recorder {
    header: Header,
    capacity: usize,
    inner: Mutex<Inner>,
}

impl Recorder {
    /// A recorder keeping the last `capacity` records per object, and appending every
    /// record to `file` when given (rotating at `max_bytes`).
    pub fn new(
        header: Header,
        capacity: usize,
        file: Option<(PathBuf, u64)>,
    ) -> std::io::Result<Self> {
        let file = file
            .map(|(path, max_bytes)| FileSink::open(path, max_bytes, &header))
            .transpose()?;
        Ok(Self {
            header,
            capacity: capacity.max(1),
            inner: Mutex::new(Inner {
                next_seq: 1,
                rings: BTreeMap::new(),
                file,
            }),
        })
    }

    /// How many records are kept per object.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records one `decide` call, in the ring of the object it was about.
    pub fn decide(&self, record: DecideRecord) {
        let mut record = Record::from(record);
        let mut inner = self.lock();
        record.set_seq(inner.next_seq);
        let line = match record.to_line() {
            Ok(line) => line,
            Err(error) => {
                tracing::error!(object = %record.object(), %error, "a decide record does not serialize: dropped");
                return;
            }
        };
        inner.next_seq += 1;
        if let Some(file) = inner.file.as_mut()
            && let Err(error) = file.append(&line, &self.header)
        {
            // A full disk must not stop the operator: keep recording in memory.
            tracing::error!(%error, "recording to the file failed; the file is closed");
            inner.file = None;
        }
        let ring = inner.rings.entry(record.object().clone()).or_default();
        if ring.len() == self.capacity {
            ring.pop_front();
        }
        ring.push_back(record);
    }

    /// Forgets an object that is gone.
    pub fn forget(&self, object: &ProxyKey) {
        self.lock().rings.remove(object);
    }

    /// How many objects have a ring.
    pub fn tracked(&self) -> usize {
        self.lock().rings.len()
    }

    /// The state, also after a panic while it was held.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::supervise::lock(&self.inner)
    }

    /// The ring buffers as a recording (all objects, or one), records in the order they
    /// were made: what `proxy-operator replay` reads. Empty (and logged) if it cannot be
    /// serialized, which no record kept here can fail: each serialized once already.
    pub fn dump(&self, object: Option<&ProxyKey>) -> String {
        let inner = self.lock();
        let mut records: Vec<&Record> = inner
            .rings
            .iter()
            .filter(|(key, _)| object.is_none_or(|o| o == *key))
            .flat_map(|(_, ring)| ring.iter())
            .collect();
        records.sort_by_key(|r| r.seq());
        let mut recording = Recording::new(self.header.clone());
        for record in records {
            recording.push(record.clone());
        }
        recording.to_jsonl().unwrap_or_else(|error| {
            tracing::error!(%error, "the recording does not serialize");
            String::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use proxy_core::testing::managed_spec;
    use proxy_core::{Observed, decide};
    use proxy_crd::ProxyStatus;

    use super::*;

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
        let recorder = Recorder::new(header(), 2, None).unwrap();
        let spec = managed_spec();
        let status = ProxyStatus::default();
        for name in ["a", "a", "a", "b"] {
            let mut observed = Observed::test();
            observed.object.namespace = "ns".into();
            observed.object.name = name.into();
            let decision = decide(&spec, &status, &observed);
            recorder.decide(DecideRecord::new(&spec, &status, &observed, &decision));
        }
        let dump = recorder.dump(None);
        assert_eq!(dump.lines().count(), 1 + 2 + 1, "{dump}");
        let report = proxy_core::record::replay(&dump).unwrap();
        assert!(report.is_identical(), "{:?}", report.divergence);
        let only_b = recorder.dump(Some(&ProxyKey::new("ns", "b")));
        assert_eq!(only_b.lines().count(), 2);
        assert!(
            only_b
                .lines()
                .nth(1)
                .unwrap()
                .contains(r#""object":"ns/b""#)
        );
        recorder.forget(&ProxyKey::new("ns", "a"));
        assert_eq!(recorder.dump(None).lines().count(), 2, "a's ring is gone");
    }

    #[test]
    fn a_lock_poisoned_by_a_panic_does_not_stop_recording() {
        let recorder = Recorder::new(header(), 2, None).unwrap();
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
        let dump = recorder.dump(None);
        assert_eq!(dump.lines().count(), 2, "{dump}");
        assert!(proxy_core::record::replay(&dump).unwrap().is_identical());
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
        let recorder = Recorder::new(header(), 8, Some((path.clone(), max))).unwrap();
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
}
