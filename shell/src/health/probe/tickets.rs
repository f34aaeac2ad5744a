//! The TLS sessions the prober resumes with probe URLs' hosts.
//!
//! rustls's own memory cache keeps 8 TLS 1.3 tickets per host and hands out the oldest
//! first: enough for a browser, not for a prober that opens hundreds of connections to one
//! probe URL's host within a second. Most of its handshakes would then be full ones, each
//! verifying the certificate chain and the server's signature again, which was a fifth of
//! the prober's CPU (`docs/benchmarks.md`, health probing). This store keeps, per host, as
//! many tickets as the prober runs probes at once, and hands out the newest first (the
//! likeliest to still be in a server's own session cache). Each probe takes one ticket and
//! its handshake brings one or more back, so however many probes are in flight to one host,
//! each finds a ticket. With a fixed 64, a fleet of 10 000 at a 30 s interval, whose probes
//! of a few hundred milliseconds keep about a hundred in flight, made most handshakes full
//! ones again. A resumed handshake is still a handshake with the origin through the tunnel:
//! only a server holding the session's secret completes it.
//!
//! Memory stays bounded: at most [`HOSTS`] hosts (the first remembered is forgotten first),
//! each with at most that many tickets of a few hundred bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use rustls::NamedGroup;
use rustls::client::{ClientSessionStore, Tls12ClientSessionValue, Tls13ClientSessionValue};
use rustls::pki_types::ServerName;

use crate::locks::lock;

/// Hosts remembered: probe URLs name a handful.
pub const HOSTS: usize = 8;

/// What is remembered of one host.
#[derive(Debug, Default)]
struct Host {
    kx_hint: Option<NamedGroup>,
    tls12: Option<Tls12ClientSessionValue>,
    /// Oldest first.
    tls13: VecDeque<Tls13ClientSessionValue>,
}

/// The prober's [`ClientSessionStore`].
#[derive(Debug)]
pub struct Tickets {
    /// TLS 1.3 tickets kept per host: the probes the prober runs at once.
    per_host: usize,
    hosts: Mutex<Hosts>,
}

impl Tickets {
    /// A store for a prober that runs up to `in_flight` probes at once (at least one ticket
    /// per host is kept).
    pub fn new(in_flight: usize) -> Self {
        Self {
            per_host: in_flight.max(1),
            hosts: Mutex::default(),
        }
    }
}

#[derive(Debug, Default)]
struct Hosts {
    by_name: HashMap<ServerName<'static>, Host>,
    /// The names of `by_name`, in the order they were first remembered.
    order: VecDeque<ServerName<'static>>,
}

impl Hosts {
    /// The entry of `name`, made room for when it is new.
    fn entry(&mut self, name: ServerName<'static>) -> &mut Host {
        if !self.by_name.contains_key(&name) {
            while self.order.len() >= HOSTS {
                if let Some(oldest) = self.order.pop_front() {
                    self.by_name.remove(&oldest);
                }
            }
            self.order.push_back(name.clone());
        }
        self.by_name.entry(name).or_default()
    }
}

impl ClientSessionStore for Tickets {
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: NamedGroup) {
        lock(&self.hosts).entry(server_name).kx_hint = Some(group);
    }

    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<NamedGroup> {
        lock(&self.hosts)
            .by_name
            .get(&server_name.to_owned())
            .and_then(|host| host.kx_hint)
    }

    fn set_tls12_session(&self, server_name: ServerName<'static>, value: Tls12ClientSessionValue) {
        lock(&self.hosts).entry(server_name).tls12 = Some(value);
    }

    fn tls12_session(&self, server_name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        lock(&self.hosts)
            .by_name
            .get(&server_name.to_owned())
            .and_then(|host| host.tls12.clone())
    }

    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        if let Some(host) = lock(&self.hosts).by_name.get_mut(server_name) {
            host.tls12 = None;
        }
    }

    fn insert_tls13_ticket(
        &self,
        server_name: ServerName<'static>,
        value: Tls13ClientSessionValue,
    ) {
        let mut hosts = lock(&self.hosts);
        let tickets = &mut hosts.entry(server_name).tls13;
        while tickets.len() >= self.per_host {
            tickets.pop_front();
        }
        tickets.push_back(value);
    }

    fn take_tls13_ticket(
        &self,
        server_name: &ServerName<'static>,
    ) -> Option<Tls13ClientSessionValue> {
        lock(&self.hosts)
            .by_name
            .get_mut(server_name)
            .and_then(|host| host.tls13.pop_back())
    }
}

#[cfg(test)]
mod tests {
    //! The tickets themselves come only from real handshakes (the e2e test
    //! `prober::probes_through_a_real_squid_resume_their_tls_sessions` counts resumed ones at
    //! the origin); here, the bound on hosts.

    use super::*;

    #[test]
    fn the_first_host_remembered_is_forgotten_first_past_the_bound() {
        let tickets = Tickets::new(4);
        let name = |i: usize| ServerName::try_from(format!("host-{i}.test")).unwrap();
        for i in 0..=HOSTS {
            tickets.set_kx_hint(name(i), NamedGroup::X25519);
        }
        assert_eq!(tickets.kx_hint(&name(0)), None);
        for i in 1..=HOSTS {
            assert_eq!(tickets.kx_hint(&name(i)), Some(NamedGroup::X25519), "{i}");
        }
        assert_eq!(lock(&tickets.hosts).order.len(), HOSTS);
    }
}
