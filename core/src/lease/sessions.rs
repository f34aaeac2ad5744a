//! Sessions: a name a client chose, standing for its one active lease.
//!
//! A gateway client puts `session-<id>` in its proxy username and expects every connection
//! of that session to leave through the same proxy until the session's TTL runs out or a
//! site bans it, as commercial gateways do. The book keeps that promise with a lease: the
//! session *is* the lease named by it, under the same selection, `maxLeases`, cooldowns and
//! ban accounting as every other lease. This module only keeps the names: which lease a
//! session names while that lease is active, and which session an active lease belongs to.
//! A binding goes when its lease ends (expiry, release, or a ban report that ends it), so the
//! map holds at most one entry per active lease.

use std::collections::BTreeMap;

use super::lease_key::LeaseKey;

/// The longest session name the book takes: a gateway's `<tenant>:<id>` with a 63-character
/// tenant and a 64-character ID.
pub const MAX_SESSION_LEN: usize = 128;

/// A session's name: 1 to [`MAX_SESSION_LEN`] ASCII letters, digits, `_`, `-`, `.` and `:`,
/// compared exactly (case matters, as in the vendors' gateways).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionName(String);

/// Why a session name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSession(pub String);

impl std::fmt::Display for InvalidSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidSession {}

impl SessionName {
    /// `text` as a session name, or why it cannot be one.
    pub fn parse(text: &str) -> Result<Self, InvalidSession> {
        if text.is_empty() || text.len() > MAX_SESSION_LEN {
            return Err(InvalidSession(format!(
                "a session is 1 to {MAX_SESSION_LEN} characters, not {}",
                text.len()
            )));
        }
        match text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
        {
            Some(bad) => Err(InvalidSession(format!(
                "a session is made of letters, digits, '_', '-', '.' and ':'; {text:?} has {bad:?}"
            ))),
            None => Ok(Self(text.to_owned())),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SessionName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The sessions of the book: name to active lease, and back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Sessions {
    /// Each session's active lease, by ID.
    by_name: BTreeMap<SessionName, String>,
    /// Each session lease's session.
    by_lease: BTreeMap<LeaseKey, SessionName>,
}

impl Sessions {
    /// The ID of the lease `name` stands for, while it is bound.
    pub(super) fn lease_of(&self, name: &SessionName) -> Option<&str> {
        self.by_name.get(name).map(String::as_str)
    }

    /// The session the lease `id` belongs to, if any.
    pub(super) fn session_of(&self, id: &str) -> Option<&SessionName> {
        self.by_lease.get(&LeaseKey::of(id))
    }

    /// Makes `name` stand for the lease `id`, in place of the lease it stood for (which
    /// then belongs to no session).
    pub(super) fn bind(&mut self, name: SessionName, id: &str) {
        if let Some(previous) = self.by_name.insert(name.clone(), id.to_owned()) {
            self.by_lease.remove(&LeaseKey::of(&previous));
        }
        self.by_lease.insert(LeaseKey::of(id), name);
    }

    /// The lease `key` ended: its session, if it had one, names no lease any more.
    pub(super) fn lease_ended(&mut self, key: &LeaseKey) {
        if let Some(name) = self.by_lease.remove(key) {
            self.by_name.remove(&name);
        }
    }

    /// How many sessions are bound.
    pub(super) fn len(&self) -> usize {
        self.by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_plain_text() {
        for good in ["acme:abc_123", "a", "crawler-7.eu", &"x".repeat(128)] {
            assert!(SessionName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(129)] {
            assert!(SessionName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_binding_follows_its_lease_and_a_rebind_frees_the_old_lease() {
        let mut sessions = Sessions::default();
        let name = SessionName::parse("acme:s1").unwrap();
        sessions.bind(name.clone(), "lease-1");
        assert_eq!(sessions.lease_of(&name), Some("lease-1"));
        assert_eq!(sessions.session_of("lease-1"), Some(&name));
        sessions.bind(name.clone(), "lease-2");
        assert_eq!(sessions.session_of("lease-1"), None);
        sessions.lease_ended(&LeaseKey::of("lease-1"));
        assert_eq!(
            sessions.lease_of(&name),
            Some("lease-2"),
            "an old lease unbinds nothing"
        );
        sessions.lease_ended(&LeaseKey::of("lease-2"));
        assert_eq!((sessions.lease_of(&name), sessions.len()), (None, 0));
    }
}
