//! The pure core of proxy-operator.
//!
//! Every decision the operator takes lives here, as plain synchronous functions of their
//! inputs: no tokio, no Kubernetes client, no clock, no random numbers, no I/O. Time comes in
//! as a value. The async shell (`proxy-operator`) observes the world, calls into this crate,
//! and executes what it returns. That split is what makes every decision testable with table
//! and property tests, and replayable from a recorded observation log.
//!
//! Purity is enforced, not just intended: `clippy.toml` forbids clocks, sleeping, threads,
//! environment and file access and unordered maps in this crate, and `tests/purity.rs` fails
//! when tokio, hyper, reqwest or kube's client enter its dependency tree.
//!
//! # Reconciling a `Proxy`
//!
//! One reconcile is `observe (shell) → decide (core) → record (shell) → execute (shell) →
//! report (shell)`:
//!
//! - the shell gathers an [`Observed`]: the metadata that matters, the resolved cloud-init,
//!   whether the provider is configured, the provider's `get(status.providerID)`, the health
//!   verdict, the timing policy and `now`;
//! - [`decide()`] returns a [`Decision`]: [`Action`]s in execution order (metadata writes, at
//!   most one provider call, at most one status write, events), the desired status, and a
//!   [`Requeue`];
//! - when the decision asks for a provider call, the shell makes it and calls [`decide()`]
//!   again with its [`Outcome`] and the first decision's status; that second decision never
//!   asks for another call.
//!
//! The full contract, with the order the shell must follow and why, is on [`decide()`].
//! Outputs are deterministic: the same inputs always give the same decision, so a recorded
//! observation replays exactly.
//!
//! Naming: our [`Action`] is not kube-runtime's `controller::Action` (a requeue); the shell
//! maps [`Requeue`] to that one and always writes kube's qualified.
//!
//! # Modules
//!
//! - [`observed`], [`error`]: the input vocabulary;
//! - [`action`]: the output vocabulary;
//! - [`decide()`]: the reconcile action table;
//! - [`conditions`], [`phase`]: how status is written;
//! - [`health`], [`probe_failure`]: what probes mean, and how a failure is worded;
//! - [`naming`], [`spec_hash`]: the instance name and the spec hash.

#![warn(missing_docs)]

pub mod action;
pub mod backoff;
pub mod conditions;
mod decide;
pub mod error;
pub mod gc;
pub mod health;
pub mod leadership;
pub mod lease;
pub mod naming;
pub mod observed;
pub mod phase;
pub mod probe_failure;
pub mod record;
pub mod spec_hash;
mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use action::{Action, CreateRequest, Decision, Event, EventType, Requeue};
pub use decide::decide;
pub use error::{ErrorClass, ProviderError};
pub use observed::{
    CloudInitView, HealthVerdict, InstanceView, Metadata, Observed, Outcome, ProviderCall, Timing,
};
pub use probe_failure::ProbeFailure;
