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

pub mod naming;
pub mod spec_hash;
