//! Deadlines on the calls a reconcile makes: an API server or a cloud that accepts a
//! connection and then says nothing would otherwise hold a reconcile (and one of the
//! `--max-concurrent-reconciles` permits) for as long as the connection lives. Past its
//! deadline (`--call-timeout-seconds`) a call fails like any other failed call: the
//! reconcile backs off, or the provider call is a transient failure the core retries.

use std::future::Future;
use std::time::Duration;

/// A call that did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("{what} did not answer within {}", friendly(*.after))]
pub struct TimedOut {
    /// What was called.
    pub what: String,
    /// The deadline.
    pub after: Duration,
}

impl From<TimedOut> for kube::Error {
    /// As a failed call of the client: the reconcile handles it as any failed read or write.
    fn from(timed_out: TimedOut) -> Self {
        kube::Error::Service(Box::new(timed_out))
    }
}

impl From<TimedOut> for proxy_core::ProviderError {
    /// A transient failure: the core retries it with backoff.
    fn from(timed_out: TimedOut) -> Self {
        proxy_core::ProviderError::transient(timed_out.to_string())
    }
}

/// `call`, failed with [`TimedOut`] (turned into its error type) when it takes longer than
/// `limit`.
pub async fn within<T, E: From<TimedOut>>(
    limit: Duration,
    what: impl FnOnce() -> String,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(E::from(TimedOut {
            what: what(),
            after: limit,
        })),
    }
}

/// A duration for messages: `30s`, `1m`.
fn friendly(duration: Duration) -> String {
    jiff::fmt::friendly::SpanPrinter::new().unsigned_duration_to_string(&duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_silent_call_fails_at_its_deadline_and_a_quick_one_answers() {
        let silent = within::<(), kube::Error>(
            Duration::from_millis(20),
            || "the API server".to_owned(),
            std::future::pending(),
        )
        .await;
        let message = silent.unwrap_err().to_string();
        assert!(
            message.contains("the API server did not answer within 20ms"),
            "{message}"
        );
        let quick: Result<u8, proxy_core::ProviderError> =
            within(Duration::from_secs(30), || "gcp create".to_owned(), async {
                Ok(7)
            })
            .await;
        assert_eq!(quick.unwrap(), 7);
        let late: Result<(), proxy_core::ProviderError> = within(
            Duration::from_millis(10),
            || "provider gcp-eu: create".to_owned(),
            std::future::pending(),
        )
        .await;
        let error = late.unwrap_err();
        assert_eq!(error.class, proxy_core::ErrorClass::Transient);
        assert_eq!(
            error.message,
            "provider gcp-eu: create did not answer within 10ms"
        );
    }
}
