//! The one lock helper every shared book is taken through: a leaf, so that any module may
//! hold a mutex without importing the panic boundary ([`crate::runtime::supervise`]) that explains
//! why poisoning is ignored.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, also when a task panicked while holding it: the state is then as the
/// panic left it, which the panic boundary's callers accept (see [`crate::runtime::supervise`])
/// rather than turn one panic into a panic of every later user.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_locks() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let holder = mutex.clone();
        let _ = std::thread::spawn(move || {
            let _guard = holder.lock();
            panic!("poison it");
        })
        .join();
        assert!(mutex.is_poisoned());
        *lock(&mutex) += 1;
        assert_eq!(*lock(&mutex), 2);
    }
}
