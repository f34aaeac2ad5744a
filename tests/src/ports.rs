//! Loopback ports for the processes the bed starts (etcd, kube-apiserver, the operator's
//! servers), which bind their ports themselves, so the bed cannot hand them a bound listener.
//!
//! Binding port 0, closing it and handing the number out is a race: until the child binds it,
//! the kernel may give the same port to another `bind(0)` of a parallel test or process, or
//! to an outgoing connection as its source port (the bed makes many). A [`Port`] instead is
//! reserved:
//!
//! - it comes from outside the kernel's ephemeral range (`ip_local_port_range`), which
//!   `bind(0)` and outgoing connections draw from, so the kernel never hands it to anyone;
//! - it is locked for as long as the [`Port`] lives, with an exclusive `flock` on a file named
//!   after it in a directory every test process shares, so no other reservation, in this
//!   process or another, returns it meanwhile (the lock goes with the process, however it
//!   ends);
//! - it was free when reserved (a test bind succeeded), so a port some other program listens
//!   on is skipped.
//!
//! A plane that restarts its etcd on the same port keeps the reservation across the restart.

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out: well above the well-known and common service ports.
const LOWEST: u16 = 10_000;

/// A loopback port reserved for this process until dropped.
#[derive(Debug)]
pub struct Port {
    number: u16,
    // Holding the open file holds the lock.
    _lock: File,
}

impl Port {
    /// Reserves a port that no other reservation holds and nothing listens on.
    pub fn reserve() -> Self {
        static CANDIDATES: OnceLock<Vec<u16>> = OnceLock::new();
        let candidates = CANDIDATES.get_or_init(candidates);
        let count = u32::try_from(candidates.len()).unwrap_or(u32::MAX);
        assert!(count > 0, "no port outside the ephemeral range to reserve");
        // Each process starts at its own place and walks on from its last reservation, so
        // parallel processes seldom try the same ports.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let start = std::process::id().wrapping_mul(7919);
        for _ in 0..count {
            let n = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % count;
            let number = candidates[n as usize];
            if let Some(port) = Self::try_reserve(number) {
                return port;
            }
        }
        panic!(
            "every loopback port from {LOWEST} outside the ephemeral range is reserved or in use"
        );
    }

    fn try_reserve(number: u16) -> Option<Self> {
        let lock = crate::reserved::try_reserve("ports", &number.to_string())?;
        // Free now (what the lock cannot know: a program outside the bed may listen on it, or
        // a child of a test process that just ended may not have been reaped yet).
        TcpListener::bind((Ipv4Addr::LOCALHOST, number)).ok()?;
        Some(Self {
            number,
            _lock: lock,
        })
    }

    /// The port's number.
    pub fn number(&self) -> u16 {
        self.number
    }
}

/// The ports from [`LOWEST`] up that lie outside the kernel's ephemeral range.
fn candidates() -> Vec<u16> {
    let (low, high) = ephemeral_range();
    (LOWEST..=u16::MAX)
        .filter(|p| !(low..=high).contains(p))
        .collect()
}

/// The kernel's ephemeral port range (Linux's default when it cannot be read).
fn ephemeral_range() -> (u16, u16) {
    let range =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut bounds = range.split_whitespace().filter_map(|n| n.parse().ok());
    match (bounds.next(), bounds.next()) {
        (Some(low), Some(high)) => (low, high),
        _ => (32_768, 60_999),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Under the old scheme (bind port 0, close, hand the number out) a thousand ports held
    /// at once collide: the kernel's random pick from ~28 000 ephemeral ports repeats with
    /// near certainty (the birthday bound), and the threads race for each freed port.
    #[test]
    fn concurrent_reservations_never_return_the_same_port() {
        let threads: Vec<_> = (0..16)
            .map(|_| std::thread::spawn(|| (0..64).map(|_| Port::reserve()).collect::<Vec<_>>()))
            .collect();
        let held: Vec<Port> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("a reserving thread"))
            .collect();
        let distinct: BTreeSet<u16> = held.iter().map(Port::number).collect();
        assert_eq!(distinct.len(), held.len(), "a port was handed out twice");
    }

    #[test]
    fn a_reserved_port_is_outside_the_ephemeral_range_and_bindable() {
        let (low, high) = ephemeral_range();
        let port = Port::reserve();
        assert!(
            !(low..=high).contains(&port.number()),
            "{} is in the ephemeral range {low}-{high}",
            port.number()
        );
        TcpListener::bind((Ipv4Addr::LOCALHOST, port.number())).expect("the reserved port binds");
    }

    #[test]
    fn a_held_port_is_not_reserved_again_and_a_dropped_one_is_free_again() {
        let port = Port::reserve();
        let number = port.number();
        assert!(
            Port::try_reserve(number).is_none(),
            "{number} reserved twice"
        );
        drop(port);
        assert!(Port::try_reserve(number).is_some(), "{number} not freed");
    }

    #[test]
    fn a_port_something_listens_on_is_skipped() {
        let port = Port::reserve();
        let number = port.number();
        let _listening = TcpListener::bind((Ipv4Addr::LOCALHOST, number)).unwrap();
        drop(port);
        assert!(Port::try_reserve(number).is_none(), "{number} is in use");
    }
}
