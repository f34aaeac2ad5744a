//! A loop on a thread of its own: its own OS thread with its own current-thread tokio
//! runtime, so that no amount of work queued on the main runtime (thousands of probe tasks,
//! reconciles, 2 MB list answers) delays it.
//!
//! The leadership rounds run here ([`crate::operator`]): on the shared runtime a renew waited
//! behind that work until the claim ran out, and every reconcile in flight failed with it.
//! The OS schedules the thread on its own, however busy the main runtime's workers are.
//!
//! What the loop talks to must live on its runtime too: kube's `Client` spawns its tower
//! `Buffer` worker on the runtime it is built on, so a Client made on the main runtime would
//! queue the loop's requests behind the main runtime again. `start` is therefore called on
//! the thread, where the loop builds its own client. Whatever it shares with the rest of the
//! process (a `std::sync::Mutex`, a `tokio::sync::watch` channel) works across runtimes.
//!
//! The thread ends when the [`Dedicated`] is stopped or dropped (the loop's future is
//! dropped at its next await, then the runtime and every task it spawned), or when the loop
//! ends by itself, which [`Dedicated::ended`] tells.

use std::future::Future;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

/// A loop running on its own thread and runtime; stopped when dropped.
#[derive(Debug)]
pub struct Dedicated {
    /// Dropped to stop the loop.
    stop: Option<oneshot::Sender<()>>,
    /// Closed when the thread is about to end; `None` once that was seen (a oneshot
    /// receiver must not be awaited again after it completed).
    ended: Option<oneshot::Receiver<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Dedicated {
    /// Starts a thread named `name` with a current-thread runtime (timers and I/O enabled),
    /// and runs the future `start` makes there until it ends or [`Dedicated::stop`] is called.
    /// Fails only when the OS refuses the thread or the runtime.
    pub fn spawn<F, Fut>(name: &str, start: F) -> std::io::Result<Self>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (ending, ended) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                // Dropped last, after the runtime and whatever the loop spawned on it, also
                // when the loop panics: the receiver then sees the end.
                let _ending = ending;
                let runtime = runtime;
                runtime.block_on(async move {
                    tokio::select! {
                        () = start() => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(Self {
            stop: Some(stop),
            ended: Some(ended),
            thread: Some(thread),
        })
    }

    /// Resolves when the loop has ended by itself (it returned or panicked), which a loop
    /// meant to run as long as the process should never do.
    pub async fn ended(&mut self) {
        if let Some(ended) = &mut self.ended {
            let _ = ended.await;
            self.ended = None;
        }
    }

    /// Stops the loop and waits, without blocking the caller's runtime, for its thread to
    /// end.
    pub async fn stop(mut self) {
        drop(self.stop.take());
        self.ended().await;
        // The thread is past its last step: joining it no longer waits. (A panic of the
        // loop was printed by the panic hook when it happened.)
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Dedicated {
    fn drop(&mut self) {
        // Without a stop sender the thread's select ends the loop at its next await; the
        // thread is not joined here (dropping happens on an async runtime).
        drop(self.stop.take());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    /// Counts ticks of 10 ms, and notes when its future is dropped.
    fn ticker(ticks: Arc<AtomicU32>, dropped: Arc<AtomicBool>) -> impl Future<Output = ()> {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        async move {
            let _flag = Flag(dropped);
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_loop_goes_on_while_the_callers_runtime_is_blocked_and_stops_when_asked() {
        let (ticks, dropped) = (
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let loop_thread = Arc::new(std::sync::Mutex::new(None));
        let dedicated = Dedicated::spawn("test-loop", {
            let (ticks, dropped, loop_thread) =
                (ticks.clone(), dropped.clone(), loop_thread.clone());
            move || {
                *loop_thread.lock().unwrap() = std::thread::current().name().map(str::to_owned);
                ticker(ticks, dropped)
            }
        })
        .unwrap();
        // Starve the only worker of this runtime, as thousands of ready tasks would: a loop
        // spawned on it could not tick at all.
        std::thread::sleep(Duration::from_millis(300));
        let during = ticks.load(Ordering::SeqCst);
        assert!(
            during >= 5,
            "{during} ticks while the caller's runtime was blocked"
        );
        assert_eq!(loop_thread.lock().unwrap().as_deref(), Some("test-loop"));

        dedicated.stop().await;
        assert!(
            dropped.load(Ordering::SeqCst),
            "the loop's future was dropped"
        );
        let after = ticks.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            ticks.load(Ordering::SeqCst),
            after,
            "it ticked after the stop"
        );
    }

    #[tokio::test]
    async fn dropping_it_stops_the_loop() {
        let (ticks, dropped) = (
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let dedicated = Dedicated::spawn("test-drop", {
            let (ticks, dropped) = (ticks.clone(), dropped.clone());
            move || ticker(ticks, dropped)
        })
        .unwrap();
        // Running first: a future dropped before its first poll never made its flag.
        while ticks.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(dedicated);
        for _ in 0..100 {
            if dropped.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the loop still runs after its Dedicated was dropped");
    }

    #[tokio::test]
    async fn a_loop_that_panics_or_returns_has_ended() {
        let mut panicking = Dedicated::spawn("test-panic", || async {
            tokio::task::yield_now().await;
            panic!("the loop panics");
        })
        .unwrap();
        tokio::time::timeout(Duration::from_secs(5), panicking.ended())
            .await
            .expect("a panicked loop has ended");
        panicking.stop().await;

        let mut returning = Dedicated::spawn("test-return", || async {}).unwrap();
        tokio::time::timeout(Duration::from_secs(5), returning.ended())
            .await
            .expect("a loop that returned has ended");
        returning.stop().await;
    }
}
