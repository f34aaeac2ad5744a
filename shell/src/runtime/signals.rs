//! Shutdown: SIGTERM (how Kubernetes stops a Pod) and SIGINT, heard from the start of a
//! program, and a stop its own parts can also send (a loop's thread that ended).

use std::sync::Arc;

use tokio::sync::watch;

/// Listens for SIGTERM and SIGINT from now on, so that a signal that arrives while the
/// program starts is not lost: the receiver turns `true` at the first.
pub fn shutdown_signals() -> anyhow::Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("installing a SIGTERM handler: {e}"))?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("installing a SIGINT handler: {e}"))?;
    let (signalled, stopping) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::info!("signal received: stopping");
        let _ = signalled.send(true);
    });
    Ok(stopping)
}

/// A stop that turns `true` at the first of `signals`, or when the program sends it.
pub fn stop_on(
    signals: watch::Receiver<bool>,
) -> (Arc<watch::Sender<bool>>, watch::Receiver<bool>) {
    let (stop, stopping) = watch::channel(false);
    let stop = Arc::new(stop);
    tokio::spawn({
        let stop = stop.clone();
        async move {
            stopped(signals).await;
            let _ = stop.send(true);
        }
    });
    (stop, stopping)
}

/// Resolves once `stopping` has turned `true`.
pub async fn stopped(mut stopping: watch::Receiver<bool>) {
    let _ = stopping.wait_for(|signalled| *signalled).await;
}
