//! The credentials of a `Proxy-Authorization: Basic ...` header (RFC 7617): the username
//! carries the options, the password the tenant's token.

use data_encoding::BASE64;

/// A username and a password. `Debug` shows the username only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The proxy username, with the options ([`super::username`]).
    pub username: String,
    /// The tenant's token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// The credentials of the `Proxy-Authorization` value `header` (`None`: the request had
/// none), or why they cannot be read: the reason goes into the 407 answer.
pub fn basic(header: Option<&[u8]>) -> Result<Credentials, String> {
    let header = header
        .ok_or("the gateway needs credentials: user-<tenant>[-options] and the tenant's token")?;
    let header = std::str::from_utf8(header).map_err(|_| "Proxy-Authorization is not text")?;
    let (scheme, encoded) = header
        .trim()
        .split_once(' ')
        .ok_or("Proxy-Authorization must be Basic <base64 of user:password>")?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(format!(
            "Proxy-Authorization scheme {scheme:?}: the gateway takes Basic only"
        ));
    }
    let decoded = BASE64
        .decode(encoded.trim().as_bytes())
        .map_err(|_| "Proxy-Authorization: the credentials are not base64")?;
    let text = String::from_utf8(decoded).map_err(|_| "the credentials are not UTF-8")?;
    let (username, password) = text
        .split_once(':')
        .ok_or("the credentials have no ':' between the user and the password")?;
    Ok(Credentials {
        username: username.to_owned(),
        password: password.to_owned(),
    })
}

/// The `Proxy-Authorization` value that carries `username` and `password` to an upstream
/// proxy: `Basic <base64 of username:password>`.
pub fn basic_header(username: &str, password: &str) -> String {
    format!(
        "Basic {}",
        BASE64.encode(format!("{username}:{password}").as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_round_trip_and_bad_ones_say_why() {
        let header = basic_header("user-acme-session-s1", "t0k:en");
        let read = basic(Some(header.as_bytes())).unwrap();
        assert_eq!(read.username, "user-acme-session-s1");
        assert_eq!(read.password, "t0k:en", "only the first ':' separates");
        let shown = format!("{read:?}");
        assert!(
            shown.contains("user-acme-session-s1") && !shown.contains("t0k"),
            "the username, never the token: {shown}"
        );
        assert!(
            basic(Some(b"basic dXNlcjpwYXNz")).is_ok(),
            "the scheme is case-insensitive"
        );
        for (header, says) in [
            (None, "needs credentials"),
            (Some(&b"Bearer abc"[..]), "Basic only"),
            (Some(b"Basic"), "must be Basic"),
            (Some(b"Basic !!!"), "not base64"),
            (Some(b"Basic dXNlcg=="), "no ':'"),
            (Some(b"Basic \xff"), "not text"),
        ] {
            let refused = basic(header).unwrap_err();
            assert!(refused.contains(says), "{header:?}: {refused}");
        }
    }
}
