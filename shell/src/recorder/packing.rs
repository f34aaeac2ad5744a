//! How the recorder keeps a line: compressed with LZ4 against a dictionary of recent lines.
//!
//! A record is a JSON document of one to four kilobytes, and a fleet's records repeat each
//! other: the same keys, conditions, reasons, and most values. LZ4 alone halves one (2.3× on
//! `tests/replay/`); against a dictionary of other records it divides it by six to ten, so
//! the same byte budget holds that many times more history. LZ4 because it is cheap enough
//! to run on every decide call (`bench-record`) and has a pure Rust implementation
//! (`lz4_flex`, with its checked decoder: a block that does not decode is an error, not a
//! panic).
//!
//! The dictionary follows what the fleet records now: it is made of the newest line of each
//! kind (decide, health, pool) and the newest lines of any kind, [`DICTIONARY_BYTES`] at
//! most, and a new one is made after the first [`FIRST_GENERATION`] lines and then every
//! [`GENERATION`] lines. Each kept line names the dictionary it was packed against; a
//! dictionary lives while a kept line names it, and its bytes count in the recorder's budget
//! for that long ([`Packer::bytes`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

/// The most bytes of lines a dictionary holds. LZ4 looks back 64 KiB at most; a larger
/// dictionary also costs more to hash on every line packed.
pub const DICTIONARY_BYTES: usize = 16 * 1024;

/// Lines packed before the first dictionary is made (they are packed against none): enough
/// to have seen a few kinds, soon after start.
pub const FIRST_GENERATION: u64 = 32;

/// Lines packed against one dictionary before the next is made.
pub const GENERATION: u64 = 4096;

/// A kept line: its LZ4 block (with its size in front) and the dictionary it needs.
#[derive(Debug, Clone)]
pub struct Packed {
    generation: u64,
    block: Bytes,
}

impl Packed {
    /// The bytes the block takes.
    pub fn len(&self) -> usize {
        self.block.len()
    }
}

/// A line taken out of the recorder for a dump: unpacked only when it is sent, so that a dump
/// of the whole fleet holds no second copy of it.
#[derive(Debug, Clone)]
pub struct Unpackable {
    dictionary: Arc<[u8]>,
    block: Bytes,
}

impl Unpackable {
    /// The line as it was recorded.
    pub fn unpack(&self) -> Result<Bytes, lz4_flex::block::DecompressError> {
        lz4_flex::block::decompress_size_prepended_with_dict(&self.block, &self.dictionary)
            .map(Bytes::from)
    }
}

/// One dictionary, and how many kept lines were packed against it.
#[derive(Debug)]
struct Generation {
    dictionary: Arc<[u8]>,
    lines: usize,
}

/// The dictionaries in use, and the newest lines the next one will be made of.
#[derive(Debug)]
pub struct Packer {
    generations: BTreeMap<u64, Generation>,
    /// The generation new lines are packed against: numbered by the lines packed before it.
    current: u64,
    packed: u64,
    newest_of_kind: BTreeMap<&'static str, Bytes>,
    newest: VecDeque<Bytes>,
    /// The bytes of `newest`.
    newest_bytes: usize,
    dictionary_bytes: usize,
}

impl Generation {
    fn new(dictionary: Vec<u8>) -> Self {
        Self {
            dictionary: Arc::from(dictionary),
            lines: 0,
        }
    }
}

impl Default for Packer {
    fn default() -> Self {
        Self {
            generations: BTreeMap::from([(0, Generation::new(Vec::new()))]),
            current: 0,
            packed: 0,
            newest_of_kind: BTreeMap::new(),
            newest: VecDeque::new(),
            newest_bytes: 0,
            dictionary_bytes: 0,
        }
    }
}

impl Packer {
    /// Packs `line`, the line of a record of `kind`, against the current dictionary.
    pub fn pack(&mut self, kind: &'static str, line: Bytes) -> Packed {
        if self.packed >= FIRST_GENERATION
            && (self.packed - FIRST_GENERATION).is_multiple_of(GENERATION)
        {
            self.renew();
        }
        self.packed += 1;
        self.remember(kind, line.clone());
        let current = self
            .generations
            .entry(self.current)
            .or_insert_with(|| Generation::new(Vec::new()));
        current.lines += 1;
        let block = lz4_flex::block::compress_prepend_size_with_dict(&line, &current.dictionary);
        Packed {
            generation: self.current,
            block: Bytes::from(block.into_boxed_slice()),
        }
    }

    /// Gives back a kept line that is dropped: its dictionary goes when no other line needs it.
    pub fn release(&mut self, packed: &Packed) {
        let Some(generation) = self.generations.get_mut(&packed.generation) else {
            return;
        };
        generation.lines = generation.lines.saturating_sub(1);
        if generation.lines == 0 && packed.generation != self.current {
            self.retire(packed.generation);
        }
    }

    /// `packed`, ready to be unpacked away from the recorder's lock.
    pub fn unpackable(&self, packed: &Packed) -> Option<Unpackable> {
        let generation = self.generations.get(&packed.generation)?;
        Some(Unpackable {
            dictionary: generation.dictionary.clone(),
            block: packed.block.clone(),
        })
    }

    /// The bytes the dictionaries in use take, and the newest lines kept for the next one.
    pub fn bytes(&self) -> usize {
        let of_kind: usize = self.newest_of_kind.values().map(Bytes::len).sum();
        self.dictionary_bytes + self.newest_bytes + of_kind
    }

    /// Keeps `line` among the newest, for the next dictionary.
    fn remember(&mut self, kind: &'static str, line: Bytes) {
        self.newest_of_kind.insert(kind, line.clone());
        self.newest_bytes += line.len();
        self.newest.push_back(line);
        while self.newest_bytes > DICTIONARY_BYTES
            && let Some(oldest) = self.newest.pop_front()
        {
            self.newest_bytes -= oldest.len();
        }
    }

    /// Makes the next dictionary: the newest line of each kind that is no longer among the
    /// newest lines, then as many of the newest lines as fit, in the order they came (where
    /// LZ4 finds two matches it takes the nearer, the newer), [`DICTIONARY_BYTES`] at most.
    fn renew(&mut self) {
        let among_newest = |line: &Bytes| self.newest.iter().any(|n| n.as_ptr() == line.as_ptr());
        let kinds: Vec<&Bytes> = self
            .newest_of_kind
            .values()
            .filter(|line| !among_newest(line))
            .collect();
        let mut room = DICTIONARY_BYTES.saturating_sub(kinds.iter().map(|l| l.len()).sum());
        let mut newest: Vec<&Bytes> = self
            .newest
            .iter()
            .rev()
            .take_while(|line| {
                let fits = line.len() <= room;
                room = room.saturating_sub(line.len());
                fits
            })
            .collect();
        newest.reverse();
        let mut dictionary: Vec<u8> = kinds
            .into_iter()
            .chain(newest)
            .flat_map(|line| line.iter().copied())
            .collect();
        if dictionary.len() > DICTIONARY_BYTES {
            dictionary.drain(..dictionary.len() - DICTIONARY_BYTES);
        }
        let old = std::mem::replace(&mut self.current, self.packed);
        self.dictionary_bytes += dictionary.len();
        self.generations
            .insert(self.current, Generation::new(dictionary));
        if self.generations.get(&old).is_some_and(|g| g.lines == 0) {
            self.retire(old);
        }
    }

    fn retire(&mut self, generation: u64) {
        if let Some(gone) = self.generations.remove(&generation) {
            self.dictionary_bytes -= gone.dictionary.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line of the shape records have: keys shared, values different.
    fn line(i: u64) -> Bytes {
        format!(
            "{{\"input\":{{\"probe\":{{\"at\":\"2026-12-03T12:{:02}:00Z\",\"latencyMs\":{},\"ok\":true}},\
             \"target\":{{\"host\":\"10.0.{}.{}\",\"uid\":\"e2c6b9f4-0a35-4d71-b8e2-{:012}\"}}}},\
             \"kind\":\"health\",\"object\":\"crawl/px-{i}\",\"seq\":{i}}}\n",
            i % 60,
            40 + i % 17,
            i / 256,
            i % 256,
            i * 7919
        )
        .into()
    }

    #[test]
    fn lines_unpack_as_they_were_packed_across_generations() {
        let mut packer = Packer::default();
        let count = FIRST_GENERATION + 2 * GENERATION + 5;
        let packed: Vec<Packed> = (0..count).map(|i| packer.pack("health", line(i))).collect();
        assert_eq!(packer.generations.len(), 4, "none, and three dictionaries");
        for (i, packed) in packed.iter().enumerate() {
            let unpacked = packer.unpackable(packed).unwrap().unpack().unwrap();
            assert_eq!(unpacked, line(i as u64), "line {i}");
        }
    }

    #[test]
    fn a_dictionary_makes_lines_smaller_and_goes_with_its_last_line() {
        let mut packer = Packer::default();
        let early: Vec<Packed> = (0..FIRST_GENERATION)
            .map(|i| packer.pack("health", line(i)))
            .collect();
        let later: Vec<Packed> = (FIRST_GENERATION..2 * FIRST_GENERATION)
            .map(|i| packer.pack("health", line(i)))
            .collect();
        let size = |lines: &[Packed]| lines.iter().map(Packed::len).sum::<usize>();
        assert!(
            2 * size(&later) < size(&early),
            "against a dictionary {} bytes, against none {}",
            size(&later),
            size(&early)
        );
        for packed in &early {
            packer.release(packed);
        }
        assert!(
            !packer.generations.contains_key(&0),
            "no line needs the empty dictionary"
        );
        let with_dictionary = packer.bytes();
        for packed in &later {
            packer.release(packed);
        }
        assert_eq!(
            packer.bytes(),
            with_dictionary,
            "the current dictionary stays for the lines to come"
        );
        assert!(packer.dictionary_bytes > 0 && packer.dictionary_bytes <= DICTIONARY_BYTES);
    }

    #[test]
    fn a_dictionary_keeps_a_line_of_each_kind_however_many_of_another_came_after() {
        // Lines of a kilobyte: the first generation's are twice what a dictionary holds.
        let big = |i: u64| Bytes::from([line(i).as_ref(), &[b' '; 768]].concat());
        let mut packer = Packer::default();
        let decide = Bytes::from_static(b"{\"kind\":\"decide\",\"object\":\"crawl/px-0\"}\n");
        packer.pack("decide", decide.clone());
        for i in 1..=FIRST_GENERATION {
            packer.pack("health", big(i));
        }
        assert!(packer.newest_bytes <= DICTIONARY_BYTES);
        let dictionary = &packer.generations[&packer.current].dictionary;
        assert!(dictionary.len() <= DICTIONARY_BYTES);
        assert!(
            dictionary.windows(decide.len()).any(|w| w == decide),
            "the decide line is in the dictionary"
        );
        // Made when the line after the first generation came: the one before it ends it.
        assert!(
            dictionary.ends_with(&big(FIRST_GENERATION - 1)),
            "the newest line ends it"
        );
    }

    #[test]
    fn a_block_that_does_not_decode_is_an_error() {
        let broken = Unpackable {
            dictionary: Arc::from(&b"dictionary"[..]),
            block: Bytes::from_static(&[200, 0, 0, 0, 0xff, 0xff]),
        };
        assert!(broken.unpack().is_err());
    }
}
