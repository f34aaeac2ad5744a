//! The brake: one sweep never deletes more than a share of a provider's instances.
//!
//! Every rule of [`select`](super::select) errs on the side of keeping, and the shell sweeps
//! only from a synced cache ([`gate`](super::gate)). The brake is the last line for what
//! those cannot see: a bug, a cache that is complete but wrong, an installation identity
//! that changed. Such a failure looks like "most of our fleet is orphaned", and the brake
//! turns a sweep that would delete the fleet into one that deletes a part of it and reports
//! the rest, loudly, at every sweep. A human has a sweep interval to look.
//!
//! # The share, and its rounding
//!
//! The allowance of a sweep is `floor(fraction × ours)`, where `ours` is the number of
//! listed instances that carry our installation identity (orphans, live, too young, unknown
//! age, no UID). Instances of other installations and unlabelled ones are not counted: in a
//! cloud project shared with another cluster their number says nothing about our fleet, and
//! counting them would let a blind sweep delete all of ours.
//!
//! Rounding *down* is deliberate. With a fraction below 1, a sweep never deletes every
//! instance of ours, however few: the tiny fleet, 1 orphan of 1 listed, keeps its one
//! instance at any fraction below 1 (allowance `floor(0.5 × 1) = 0`), because "all of our
//! instances are orphans" is exactly what a blind sweep sees. Held-back orphans are logged
//! with their IDs and counted at every sweep, until a human deletes them or sets
//! `--gc-max-delete-fraction 1`, which turns the brake off. After a real mass deletion the
//! orphans drain over several sweeps (4 of 4 at 0.5: 2, then 1 of the remaining 2, then
//! the last is held for a human), which is the point: time to look.
//!
//! The fraction is kept in parts per million, so that the allowance is exact integer
//! arithmetic (0.29 of 100 is 29, not the 28 that `floor(0.29 * 100.0)` gives in floating
//! point).
//!
//! # Which orphans go first
//!
//! The oldest, then by provider ID: the longest-orphaned machine has cost the most and is
//! the least likely to be a cache artefact.

use std::fmt;
use std::str::FromStr;

use super::{Orphan, Selection};

const MILLION: u64 = 1_000_000;

/// The largest share of our instances one sweep may delete, from 0 (delete nothing, report
/// only) to 1 (no brake). `Display` and `FromStr` use the decimal form (`0.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeleteFraction {
    ppm: u32,
}

/// A [`DeleteFraction`] that is not a number from 0 to 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FractionError(String);

impl fmt::Display for FractionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "must be a number from 0 to 1 (a share), got {}", self.0)
    }
}

impl std::error::Error for FractionError {}

impl DeleteFraction {
    /// Half: the default of `--gc-max-delete-fraction`.
    pub const DEFAULT: Self = Self { ppm: 500_000 };
    /// No brake.
    pub const ALL: Self = Self { ppm: 1_000_000 };

    /// The fraction `share`, rounded to the nearest millionth; an error unless it is a
    /// finite number from 0 to 1.
    pub fn new(share: f64) -> Result<Self, FractionError> {
        if !(0.0..=1.0).contains(&share) {
            return Err(FractionError(share.to_string()));
        }
        // In range and finite, so the product is within 0..=1e6 and the cast is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ppm = (share * 1e6).round() as u32;
        Ok(Self { ppm })
    }

    /// The share in parts per million.
    pub fn parts_per_million(self) -> u32 {
        self.ppm
    }

    /// How many of `ours` instances one sweep may delete: `floor(fraction × ours)`.
    pub fn allowance(self, ours: usize) -> usize {
        let ours = u64::try_from(ours).unwrap_or(u64::MAX);
        let allowed = u128::from(ours) * u128::from(self.ppm) / u128::from(MILLION);
        usize::try_from(allowed).unwrap_or(usize::MAX)
    }
}

impl Default for DeleteFraction {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for DeleteFraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", f64::from(self.ppm) / 1e6)
    }
}

impl FromStr for DeleteFraction {
    type Err = FractionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let share: f64 = text
            .trim()
            .parse()
            .map_err(|_| FractionError(format!("{text:?}")))?;
        Self::new(share)
    }
}

/// What one sweep of one provider does with its [`Selection`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "delete the `delete` orphans, report the held-back ones"]
pub struct Deletions {
    /// The orphans to delete now, oldest first: at most [`Deletions::allowance`].
    pub delete: Vec<Orphan>,
    /// The orphans the brake holds back this sweep, oldest first: log and count them.
    pub held_back: Vec<Orphan>,
    /// How many listed instances carry our installation identity.
    pub ours: usize,
    /// How many this sweep may delete: `floor(fraction × ours)`.
    pub allowance: usize,
}

/// Applies the brake to one provider's selection: the oldest orphans up to the allowance
/// are deleted, the rest held back. Pure and deterministic.
pub fn plan(selection: &Selection, fraction: DeleteFraction) -> Deletions {
    let ours = selection.orphans.len()
        + selection
            .kept
            .iter()
            .filter(|kept| kept.reason.is_ours())
            .count();
    let allowance = fraction.allowance(ours);
    let mut orphans = selection.orphans.clone();
    orphans.sort_by(|a, b| {
        (a.created_at, &a.provider_id, &a.uid).cmp(&(b.created_at, &b.provider_id, &b.uid))
    });
    let held_back = orphans.split_off(allowance.min(orphans.len()));
    Deletions {
        delete: orphans,
        held_back,
        ours,
        allowance,
    }
}
