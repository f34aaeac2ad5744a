//! `status.phase`: one word summarising the conditions, for `kubectl get px`.
//!
//! The phase is computed, never stored as state: it is a pure function of whether the object
//! is being deleted, how far provisioning got, and the health verdict. Keeping it a function
//! of three small values is what makes its truth table testable in full.

use proxy_crd::Phase;

/// How far provisioning got, as the phase needs it. Derived from the `Provisioned` reason by
/// [`ProvisionedReason::progress`](crate::conditions::ProvisionedReason::progress).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Progress {
    /// Nothing exists and nothing is being created: waiting on quota or cloud-init.
    NotStarted,
    /// An instance is being created, booted, replaced, recreated or deleted.
    InProgress,
    /// The instance runs (Managed) or the endpoint is known (External): health decides.
    Provisioned,
    /// Provisioning failed for good: a permanent provider error, an unconfigured provider, a
    /// missing endpoint. A human has to change something.
    Failed,
}

/// The phase for a proxy whose deletion was requested (`deleting`), whose provisioning got
/// as far as `progress`, and whose health verdict is `healthy` (`None`: no verdict yet).
///
/// Deletion wins over everything (deleting never shows `Failed`), and a provisioned proxy
/// without a verdict is `Provisioning`, not `Ready`: a proxy nobody has probed is not
/// advertised.
pub fn compute_phase(deleting: bool, progress: Progress, healthy: Option<bool>) -> Phase {
    match (deleting, progress, healthy) {
        (true, _, _) => Phase::Deleting,
        (false, Progress::Failed, _) => Phase::Failed,
        (false, Progress::NotStarted, _) => Phase::Pending,
        (false, Progress::InProgress, _) | (false, Progress::Provisioned, None) => {
            Phase::Provisioning
        }
        (false, Progress::Provisioned, Some(true)) => Phase::Ready,
        (false, Progress::Provisioned, Some(false)) => Phase::Unhealthy,
    }
}
