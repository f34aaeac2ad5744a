//! What a libvirt domain state means to the core.

use virt::domain::DomainState;
use virt::enumutil::Enum;

/// The core's view of a domain state, before the address is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Running: it serves once it has an address.
    Running,
    /// Defined but not running yet, or in a state libvirt does not name.
    Provisioning,
    /// Paused, suspended, shutting down or shut off: replaced by the core.
    Stopped,
    /// Crashed.
    Terminated,
}

/// The phase of a domain in `state` (as the Go prototype's kvm provider mapped them:
/// running → running, paused and shut off → stopped, crashed → terminated).
pub fn phase_of(state: Enum<DomainState, u32>) -> Phase {
    match state {
        Enum::Known(DomainState::Running | DomainState::Blocked) => Phase::Running,
        Enum::Known(
            DomainState::Paused
            | DomainState::PMSuspended
            | DomainState::Shutdown
            | DomainState::Shutoff,
        ) => Phase::Stopped,
        Enum::Known(DomainState::Crashed) => Phase::Terminated,
        Enum::Known(DomainState::NoState) | Enum::Unknown(_) => Phase::Provisioning,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_state_table() {
        let cases = [
            (Enum::Known(DomainState::Running), Phase::Running),
            (Enum::Known(DomainState::Blocked), Phase::Running),
            (Enum::Known(DomainState::Paused), Phase::Stopped),
            (Enum::Known(DomainState::PMSuspended), Phase::Stopped),
            (Enum::Known(DomainState::Shutdown), Phase::Stopped),
            (Enum::Known(DomainState::Shutoff), Phase::Stopped),
            (Enum::Known(DomainState::Crashed), Phase::Terminated),
            (Enum::Known(DomainState::NoState), Phase::Provisioning),
            (Enum::Unknown(99), Phase::Provisioning),
        ];
        for (state, want) in cases {
            assert_eq!(phase_of(state), want, "{state:?}");
        }
    }
}
