//! The bearer token of the discovery API and of the admin port's debug endpoints.

use sha2::{Digest, Sha256};

/// A bearer token, kept as its SHA-256 digest, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BearerToken(Option<[u8; 32]>);

impl BearerToken {
    /// The token `token`; an empty or absent one is no token.
    pub fn new(token: Option<&str>) -> Self {
        Self(token.filter(|t| !t.is_empty()).map(digest))
    }

    /// Whether a token is set.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Whether the `Authorization` header value `header` carries the token: `Bearer <token>`.
    /// With no token set, every request is accepted. Digests compare in constant time and
    /// have the same length whatever the presented token's.
    pub fn accepts(&self, header: Option<&str>) -> bool {
        let Some(expected) = &self.0 else {
            return true;
        };
        let presented = header
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        subtle::ConstantTimeEq::ct_eq(&digest(presented)[..], &expected[..]).into()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::BearerToken;

    #[test]
    fn only_the_bearer_token_is_accepted_and_no_token_accepts_all() {
        let token = BearerToken::new(Some("s3cret"));
        assert!(token.accepts(Some("Bearer s3cret")));
        for header in [None, Some("Bearer nope"), Some("s3cret"), Some("Bearer ")] {
            assert!(!token.accepts(header), "{header:?} was accepted");
        }
        for none in [BearerToken::new(None), BearerToken::new(Some(""))] {
            assert!(!none.is_set());
            assert!(none.accepts(None));
        }
    }
}
