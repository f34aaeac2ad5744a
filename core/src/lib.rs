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
//! One reconcile is `observe (shell) → decide (core) → record (shell) → execute (shell)`,
//! once or twice, driven by [`Reconcile`] (module [`reconcile`]), which owns the order:
//!
//! - the shell gathers an [`Observed`]: the metadata that matters, the resolved cloud-init,
//!   whether the provider is configured, the provider's `get` of [`instance_id`], the health
//!   verdict, the timing policy, the object's consecutive failures and `now`;
//! - [`Reconcile::start`] makes the first [`decide()`]: a typed [`Decision`] (metadata
//!   writes, at most one [`ProviderRequest`], the desired status, events, a [`Requeue`]);
//! - the shell executes the metadata writes and, when asked, the provider call, whose
//!   [`Outcome`] makes the second decision ([`PendingCall::after`]);
//! - the [`Plan`] says the status to write (once), the events to emit, and the
//!   [`Followup`]: when to reconcile again and the failure count to keep.
//!
//! The rules of each step are on [`decide()`] and in [`reconcile`]. Outputs are
//! deterministic: the same inputs always give the same decision, so a recorded observation
//! replays exactly.
//!
//! Naming: our [`Action`] is not kube-runtime's `controller::Action` (a requeue); the shell
//! maps [`Requeue`] to that one and always writes kube's qualified.
//!
//! # Modules
//!
//! - [`observed`], [`error`]: the input vocabulary; [`classify`]: every provider's failures
//!   in the core's error classes, from the whole answer; [`cloud_init`]: where the cloud-init
//!   comes from;
//! - [`action`]: the output vocabulary;
//! - [`decide()`]: the reconcile action table; [`reconcile`]: the driver that runs it;
//! - [`backoff`]: retry delays;
//! - [`conditions`], [`phase`]: how status is written;
//! - [`ProxyKey`]: a proxy's identity, `namespace/name`, wherever something is kept per proxy;
//! - [`InstanceState`]: what a provider's `get` answers, as [`InstanceView`] takes it in;
//! - [`health`], [`probe_failure`]: what probes mean, and how a failure is worded;
//! - [`probe_schedule`]: which proxy is probed when;
//! - [`provider_health`]: what a provider's health check means, for its `ProviderHealth`
//!   object and for the Proxies that use it;
//! - [`pacing`]: how fast a provider is called: one budget and one backoff per provider and
//!   quota scope, so that a rate limit slows the whole provider, not each Proxy on its own;
//! - [`naming`], [`spec_hash`]: the instance name, the credentials Secret's name, and the
//!   spec hash;
//! - [`egress`]: whether a proxy leaves from the address it publishes, and which proxies
//!   share one egress address;
//! - [`pool`]: what a `ProxyPool` creates, drains and deletes ([`decide_pool`]);
//! - [`event_series`]: which Kubernetes Events are repeats of one published minutes ago.
//! - [`topology`]: where a proxy stands (provider, region, zone, egress network), as the
//!   labels the operator writes on it.
//! - [`gateway`]: what a gateway client asked for in its proxy username, the lease that
//!   makes, the retry on another upstream, what a site's answer reports, and the refusals.

#![warn(missing_docs)]

pub mod action;
pub mod backoff;
pub mod banned;
pub mod classify;
pub mod cloud_init;
pub mod conditions;
mod decide;
pub mod digest;
pub mod egress;
pub mod error;
pub mod event;
pub mod event_series;
pub mod gateway;
pub mod gc;
pub mod health;
mod instance;
mod key;
pub mod leadership;
pub mod lease;
pub mod naming;
pub mod observed;
pub mod pacing;
pub mod phase;
pub mod pool;
pub mod probe_failure;
pub mod probe_schedule;
pub mod provider_health;
pub mod reconcile;
pub mod record;
pub mod spec_hash;
mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod topology;
pub mod wake;

pub use action::{Action, CreateRequest, Decision, MetadataWrite, ProviderRequest, Requeue};
pub use banned::BlockedSites;
pub use decide::{FIRST_VERDICT_SLACK, decide};
pub use error::{Cause, ErrorClass, ProviderError};
pub use event::{Event, EventType};
pub use instance::InstanceState;
pub use key::{InvalidKey, Key, KeyProblem, Kind, ObjectKey, PoolKey, ProxyKey};
pub use observed::{
    CloudInitView, HealthVerdict, Hold, InstanceView, Metadata, Observed, Outcome, ProviderCall,
    Timing, instance_id,
};
pub use pool::decide_pool;
pub use probe_failure::ProbeFailure;
pub use provider_health::ProviderDown;
pub use reconcile::{AfterCall, Decided, Effects, Followup, Next, PendingCall, Plan, Reconcile};
pub use wake::{Interruption, Wake};
