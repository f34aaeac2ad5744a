//! Names reserved across every test process of this user, for as long as the process holds
//! them: an exclusive `flock` on a file named after the name, in a directory every test
//! process shares. The lock goes with the process, however it ends. Loopback ports
//! ([`crate::ports`]) and squids' loopback address blocks ([`crate::squid`]) are reserved
//! this way, so that test binaries running side by side never take the same one.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::PathBuf;

/// The lock on `name` in the reservations of `kind` (a directory
/// `$TMPDIR/proxy-operator-<kind>`), if no one else holds it: held while the file lives.
pub fn try_reserve(kind: &str, name: &str) -> Option<File> {
    let dir = std::env::temp_dir().join(format!("proxy-operator-{kind}"));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("create the lock directory {}: {e}", dir.display()));
    let path: PathBuf = dir.join(name);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open the lock {}: {e}", path.display()));
    match lock.try_lock() {
        Ok(()) => Some(lock),
        Err(TryLockError::WouldBlock) => None,
        Err(TryLockError::Error(e)) => panic!("lock {}: {e}", path.display()),
    }
}
