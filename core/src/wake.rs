//! When a controller looks at an object again, and why a reconcile stopped early: shared by
//! the Proxy reconcile's driver and the pool's failure policy, so a leaf.

use std::time::Duration;

/// When the controller reconciles an object again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// After this long, unless a watch event comes first.
    After(Duration),
    /// On the next change of the object, its Secret, its health, or the leadership.
    OnChange,
}

/// Why a reconcile stopped before its plan was carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// This replica's leadership claim ran out: the new leader reconciles every object, and
    /// so does this replica if it leads again. It is not the object's failure.
    NotLeader,
    /// A read or a write failed (the API server, a panic): retry with backoff.
    Failed,
}
