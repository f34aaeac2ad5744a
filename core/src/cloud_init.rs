//! Where a Proxy's cloud-init comes from, and what a Secret the shell read means for it.
//!
//! Resolving `spec.cloudInit` takes one read (the Secret of `secretRef`), so it is sans-IO in
//! two steps: [`source`] says whether a read is needed at all, and [`from_secret`] turns what
//! the read found into the [`CloudInitView`] `decide` gets. Which Secrets count (only those
//! labelled [`CLOUD_INIT_SECRET_LABEL`]`=true`, so the operator never reads unrelated secrets
//! on a user's say-so) and how a missing one is worded are decided here.

use std::collections::BTreeMap;

use proxy_crd::{CLOUD_INIT_SECRET_LABEL, CloudInit, SecretKeyRef};

use crate::observed::CloudInitView;

/// What resolving `spec.cloudInit` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source<'a> {
    /// Nothing to read: the view is known (not set, or inline).
    Known,
    /// Read this Secret of the Proxy's namespace, then call [`from_secret`].
    Secret(&'a SecretKeyRef),
}

/// What resolving `cloud_init` (`spec.cloudInit`) takes; with [`Source::Known`], the view is
/// [`known`]'s.
pub fn source(cloud_init: Option<&CloudInit>) -> Source<'_> {
    match cloud_init {
        Some(CloudInit {
            inline: None,
            secret_ref: Some(reference),
        }) => Source::Secret(reference),
        Some(_) | None => Source::Known,
    }
}

/// The view of a `spec.cloudInit` that needs no read: not set, or inline (the API server
/// refuses a spec with both; inline wins if one gets through).
pub fn known(cloud_init: Option<&CloudInit>) -> CloudInitView {
    match cloud_init.and_then(|c| c.inline.as_ref()) {
        Some(inline) => CloudInitView::Resolved {
            content: inline.clone(),
        },
        None => CloudInitView::NotSet,
    }
}

/// A Secret as the shell read it.
#[derive(Clone, Copy, Debug)]
pub struct SecretRead<'a> {
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The bytes under the referenced key, if it has that key.
    pub value: Option<&'a [u8]>,
}

/// The view of the Secret `reference` names, as the read found it (`None`: no such Secret).
/// Content that is not UTF-8 is taken lossily: cloud-init itself is text.
pub fn from_secret(reference: &SecretKeyRef, read: Option<SecretRead<'_>>) -> CloudInitView {
    let unavailable = |message: String| CloudInitView::Unavailable { message };
    let Some(secret) = read else {
        return unavailable(format!("Secret {:?} not found", reference.name));
    };
    if secret
        .labels
        .get(CLOUD_INIT_SECRET_LABEL)
        .map(String::as_str)
        != Some("true")
    {
        return unavailable(format!(
            "Secret {:?} lacks the label {CLOUD_INIT_SECRET_LABEL}=true",
            reference.name
        ));
    }
    match secret.value {
        Some(bytes) => CloudInitView::Resolved {
            content: String::from_utf8_lossy(bytes).into_owned(),
        },
        None => unavailable(format!(
            "Secret {:?} has no key {:?}",
            reference.name, reference.key
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> SecretKeyRef {
        SecretKeyRef {
            name: "squid-init".to_owned(),
            key: "user-data".to_owned(),
        }
    }

    #[test]
    fn only_a_secret_ref_needs_a_read() {
        let inline = CloudInit {
            inline: Some("#cloud-config".to_owned()),
            secret_ref: None,
        };
        let by_ref = CloudInit {
            inline: None,
            secret_ref: Some(reference()),
        };
        let both = CloudInit {
            inline: Some("#cloud-config".to_owned()),
            secret_ref: Some(reference()),
        };
        let empty = CloudInit {
            inline: None,
            secret_ref: None,
        };
        assert_eq!(source(None), Source::Known);
        assert_eq!(known(None), CloudInitView::NotSet);
        assert_eq!(source(Some(&empty)), Source::Known);
        assert_eq!(known(Some(&empty)), CloudInitView::NotSet);
        for view in [&inline, &both] {
            assert_eq!(source(Some(view)), Source::Known);
            assert_eq!(
                known(Some(view)),
                CloudInitView::Resolved {
                    content: "#cloud-config".to_owned()
                }
            );
        }
        assert_eq!(source(Some(&by_ref)), Source::Secret(&reference()));
    }

    #[test]
    fn a_secret_counts_only_labelled_and_with_the_key() {
        let labelled = BTreeMap::from([(CLOUD_INIT_SECRET_LABEL.to_owned(), "true".to_owned())]);
        let unlabelled = BTreeMap::from([(CLOUD_INIT_SECRET_LABEL.to_owned(), "yes".to_owned())]);
        let read = |labels, value| Some(SecretRead { labels, value });
        let unavailable = |message: &str| CloudInitView::Unavailable {
            message: message.to_owned(),
        };
        let cases = [
            (None, unavailable("Secret \"squid-init\" not found")),
            (
                read(&unlabelled, Some(b"x".as_slice())),
                unavailable(
                    "Secret \"squid-init\" lacks the label crawl.example.com/cloud-init=true",
                ),
            ),
            (
                read(&labelled, None),
                unavailable("Secret \"squid-init\" has no key \"user-data\""),
            ),
            (
                read(&labelled, Some(b"#cloud-config\n".as_slice())),
                CloudInitView::Resolved {
                    content: "#cloud-config\n".to_owned(),
                },
            ),
            (
                read(&labelled, Some([0xff, b'a'].as_slice())),
                CloudInitView::Resolved {
                    content: "\u{fffd}a".to_owned(),
                },
            ),
        ];
        for (found, view) in cases {
            assert_eq!(from_secret(&reference(), found), view, "{found:?}");
        }
    }
}
