//! The gateway's decisions: what a client of `proxy-operator gateway` asked for, which lease
//! that makes, what to do when an upstream fails, what a site's answer reports, and what the
//! client is told when the gateway cannot serve it.
//!
//! The gateway is an HTTP forward proxy that any client can use with one address: the
//! options go in the proxy username ([`username`]), the password is the tenant's token, and
//! the target site is the CONNECT host or the absolute URI's host ([`target`]). Each client
//! connection asks the one lease book for an upstream: a new lease, or the session's lease
//! ([`LeaseAsk`], [`crate::lease::LeaseBook::acquire_with`]). The shell's data path (accept,
//! CONNECT, copy bytes, forward plain HTTP) carries these decisions out and takes none:
//!
//! | decision | here |
//! |---|---|
//! | the username's options, checked | [`username::parse`] |
//! | the credentials of `Proxy-Authorization` | [`credentials`] |
//! | the site of a request | [`target::Target`] |
//! | the lease request of a connection | [`Options::ask`] |
//! | one retry on another upstream, before any byte went to the client | [`Attempts`] |
//! | what a plain-HTTP answer reports, and whether the connection keeps its upstream | [`feedback::after_answer`] |
//! | the status, error code and `Retry-After` of every refusal | [`Refusal`] |
//! | the lease's holder: the gateway's, or none for a session | [`LeaseAsk::holder`] |
//! | whether a CONNECT names the gateway itself | [`target::Target::is_gateway`] |
//! | how an exchange ended, and whom that speaks against | [`Outcome`] |
//! | whether a lease's release is sent again, and when | [`release::ReleaseTries`] |

mod attempts;
pub mod credentials;
pub mod feedback;
pub mod outcome;
mod refusal;
pub mod release;
pub mod target;
pub mod username;

pub use attempts::{Attempts, UpstreamFailure};
pub use outcome::{Blame, Ending, Outcome, Side};
pub use refusal::Refusal;
pub use username::{Grammar, InvalidUsername, LeaseAsk, Options};
