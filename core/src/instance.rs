//! What a provider's `get` answers, in the core's vocabulary.
//!
//! Providers return an [`InstanceState`] (or a [`ProviderError`]); the shell passes the
//! answer on as the [`InstanceView`] of the observation with [`InstanceView::from`], so no
//! second copy of these states lives in the shell. `InstanceView` has two more cases than a
//! provider can answer: [`InstanceView::NotLookedUp`] (the shell made no call) and
//! [`InstanceView::Error`] (the call failed), and keeps its own serialized shape, which the
//! recordings carry.

use crate::error::ProviderError;
use crate::observed::InstanceView;

/// What a provider reports about one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceState {
    /// Exists but does not serve yet.
    Provisioning,
    /// Runs and serves at this address. An empty address counts as provisioning: the core
    /// never publishes one.
    Running(String),
    /// Exists but is stopped.
    Stopped,
    /// Terminated, failed, or being deleted.
    Terminated,
    /// Does not exist.
    NotFound,
    /// Does not exist because its creation failed after the provider accepted it: what a
    /// provider that creates asynchronously answers when the create it submitted failed.
    CreateFailed(ProviderError),
}

impl From<InstanceState> for InstanceView {
    fn from(state: InstanceState) -> Self {
        match state {
            InstanceState::Provisioning => Self::Provisioning,
            InstanceState::Running(ip) => Self::Running { ip },
            InstanceState::Stopped => Self::Stopped,
            InstanceState::Terminated => Self::Terminated,
            InstanceState::NotFound => Self::NotFound,
            InstanceState::CreateFailed(error) => Self::CreateFailed(error),
        }
    }
}

/// The whole answer of a `get`: the state it reported, or [`InstanceView::Error`].
impl From<Result<InstanceState, ProviderError>> for InstanceView {
    fn from(answer: Result<InstanceState, ProviderError>) -> Self {
        answer.map_or_else(Self::Error, Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_of_a_get_has_its_view() {
        let failed = ProviderError::transient("connection reset");
        for (answer, view) in [
            (Ok(InstanceState::Provisioning), InstanceView::Provisioning),
            (
                Ok(InstanceState::Running("10.0.0.7".into())),
                InstanceView::Running {
                    ip: "10.0.0.7".into(),
                },
            ),
            (Ok(InstanceState::Stopped), InstanceView::Stopped),
            (Ok(InstanceState::Terminated), InstanceView::Terminated),
            (Ok(InstanceState::NotFound), InstanceView::NotFound),
            (
                Ok(InstanceState::CreateFailed(failed.clone())),
                InstanceView::CreateFailed(failed.clone()),
            ),
            (Err(failed.clone()), InstanceView::Error(failed)),
        ] {
            assert_eq!(InstanceView::from(answer.clone()), view, "{answer:?}");
        }
    }
}
