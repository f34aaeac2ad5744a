//! Credentials per proxy: the username and password a proxy's squid checks (basic auth), kept
//! in one Secret per Proxy.
//!
//! The core decides when a Managed proxy's Secret is issued and when it is revoked
//! (`MetadataWrite::IssueCredentials` before every create, `RevokeCredentials` once the
//! instance is gone) and names it (`proxy_core::naming`). This module carries that out: it
//! draws the password from the operator's OS random source, writes the Secret (owned by the
//! Proxy, so Kubernetes' garbage collector removes it with the Proxy too) and deletes it. It
//! also keeps the cache of the Secrets labelled [`CREDENTIALS_SECRET_LABEL`], which the
//! prober (its probes authenticate) and the lease answer read.
//!
//! The password is in the Secret and, in memory, in [`Credentials`], whose `Debug` hides it.
//! It reaches no log line, Event, status, metric or recording: the core only ever sees the
//! Secret's name, and the squid of a Managed proxy gets a SHA-512-crypt hash of it (the
//! Secret's [`PASSWD_KEY`]), never the password itself.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use proxy_crd::{CREDENTIALS_SECRET_LABEL, Mode, Proxy};
use sha_crypt::{Algorithm, Params, PasswordHasher, ShaCrypt};

/// The Secret's key holding the username.
pub const USERNAME_KEY: &str = "username";
/// The Secret's key holding the password.
pub const PASSWORD_KEY: &str = "password";
/// The Secret's key holding the squid passwd file (one `user:$6$...` line, the format of
/// `basic_ncsa_auth`): what the proxy's instance gets, instead of the password.
pub const PASSWD_KEY: &str = "passwd";

/// Random bytes in a password: 128 bits, written as 32 hex digits (nothing a client would
/// have to percent-encode).
const PASSWORD_BYTES: usize = 16;

/// A proxy's username and password. `Debug` shows the username only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    username: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Why credentials could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The OS random source failed.
    #[error("drawing a password from the OS random source: {0}")]
    Random(getrandom::Error),
    /// The passwd line could not be hashed.
    #[error("hashing the password: {0}")]
    Hash(String),
    /// The API server refused the Secret.
    #[error("writing the credentials Secret {name:?}: {source}")]
    Api {
        /// The Secret's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer in time.
    #[error(transparent)]
    TimedOut(#[from] crate::deadline::TimedOut),
    /// The Secret exists, but without a passwd line (someone made or edited it by hand).
    #[error(
        "the credentials Secret {0:?} exists but holds no {PASSWD_KEY:?} key: delete it, and \
         the operator issues new credentials"
    )]
    Malformed(String),
}

impl Credentials {
    /// Credentials with this username and password.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    /// New credentials for `username`, with a password from the OS random source.
    pub fn generate(username: &str) -> Result<Self, IssueError> {
        let mut bytes = [0u8; PASSWORD_BYTES];
        getrandom::fill(&mut bytes).map_err(IssueError::Random)?;
        let password: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Self::new(username, password))
    }

    /// The username.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The password: for the probe and the lease answer only.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The squid passwd line for these credentials: `username:$6$rounds=1000$salt$hash`,
    /// SHA-512-crypt with a random salt, which `basic_ncsa_auth` verifies through the
    /// system's crypt(3).
    ///
    /// With the fewest rounds the format allows ([`Params::ROUNDS_MIN`], not the default
    /// 5 000): rounds stretch a guessable password, and this one is 128 random bits, which no
    /// number of rounds makes harder to find. The default made hashing the operator's largest
    /// CPU cost while a fleet is created (a quarter of it in `bench-reconcile`), and squid's
    /// helper pays the same again for every check.
    pub fn passwd_line(&self) -> Result<String, IssueError> {
        let mut salt = [0u8; 12];
        getrandom::fill(&mut salt).map_err(IssueError::Random)?;
        let params =
            Params::new(Params::ROUNDS_MIN).map_err(|e| IssueError::Hash(e.to_string()))?;
        let hash = ShaCrypt::new(Algorithm::Sha512Crypt, params)
            .hash_password_with_salt(self.password.as_bytes(), &salt)
            .map_err(|e| IssueError::Hash(e.to_string()))?;
        Ok(format!("{}:{}\n", self.username, hash.as_str()))
    }

    /// The credentials a Secret holds (its `username` and `password` keys), if it holds both.
    pub fn from_secret(secret: &Secret) -> Option<Self> {
        let data = secret.data.as_ref()?;
        let text = |key: &str| {
            data.get(key)
                .and_then(|ByteString(bytes)| String::from_utf8(bytes.clone()).ok())
                .map(|text| text.trim_end_matches(['\n', '\r']).to_owned())
                .filter(|text| !text.is_empty())
        };
        Some(Self::new(text(USERNAME_KEY)?, text(PASSWORD_KEY)?))
    }
}

/// The Secret `name` holding `credentials` for the Proxy `proxy_name` (UID `proxy_uid`) in
/// `namespace`: labelled for the operator's cache, owned by the Proxy.
pub fn secret(
    namespace: &str,
    name: &str,
    proxy_name: &str,
    proxy_uid: &str,
    credentials: &Credentials,
) -> Result<Secret, IssueError> {
    let bytes = |text: &str| ByteString(text.as_bytes().to_vec());
    let data = BTreeMap::from([
        (USERNAME_KEY.to_owned(), bytes(credentials.username())),
        (PASSWORD_KEY.to_owned(), bytes(credentials.password())),
        (PASSWD_KEY.to_owned(), bytes(&credentials.passwd_line()?)),
    ]);
    let mut secret = Secret {
        data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    };
    secret.metadata.name = Some(name.to_owned());
    secret.metadata.namespace = Some(namespace.to_owned());
    secret.metadata.labels = Some(BTreeMap::from([
        (CREDENTIALS_SECRET_LABEL.to_owned(), "true".to_owned()),
        (
            proxy_core::gc::labels::PROXY_NAME.to_owned(),
            proxy_name.to_owned(),
        ),
    ]));
    // Without blockOwnerDeletion, as for the Pods: that would need rights on Proxies'
    // finalizers. The operator revokes the Secret itself before the finalizer goes.
    secret.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: Proxy::api_version(&()).into_owned(),
            kind: Proxy::kind(&()).into_owned(),
            name: proxy_name.to_owned(),
            uid: proxy_uid.to_owned(),
            controller: Some(true),
            block_owner_deletion: None,
        },
    ]);
    Ok(secret)
}

/// Issues the credentials Secret `name` of the Proxy `proxy_name` (UID `proxy_uid`) in
/// `namespace`, or keeps the one there (an earlier attempt of the same create made it), and
/// returns its passwd file for the instance.
pub async fn issue(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    proxy_name: &str,
    proxy_uid: &str,
) -> Result<String, IssueError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let api = |source| IssueError::Api {
        name: name.to_owned(),
        source,
    };
    let credentials = Credentials::generate(proxy_name)?;
    let wanted = secret(namespace, name, proxy_name, proxy_uid, &credentials)?;
    let written = match secrets.create(&PostParams::default(), &wanted).await {
        Ok(written) => written,
        Err(kube::Error::Api(status)) if status.code == 409 => {
            secrets.get(name).await.map_err(api)?
        }
        Err(error) => return Err(api(error)),
    };
    written
        .data
        .as_ref()
        .and_then(|data| data.get(PASSWD_KEY))
        .and_then(|ByteString(bytes)| String::from_utf8(bytes.clone()).ok())
        .ok_or_else(|| IssueError::Malformed(name.to_owned()))
}

/// Deletes the credentials Secret `name` in `namespace`; done when it is gone already.
pub async fn revoke(client: &kube::Client, namespace: &str, name: &str) -> Result<(), kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match secrets.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}

/// The Secret holding a proxy's credentials, if it has one: the one the operator issues for a
/// Managed proxy (whether it exists is the core's decision), `spec.credentialsSecretRef` for
/// an External one.
pub fn secret_of(proxy: &Proxy) -> Option<ObjectRef<Secret>> {
    let name = match proxy.spec.mode {
        Mode::Managed => {
            proxy_core::naming::credentials_secret_name(proxy.metadata.uid.as_deref()?)
        }
        Mode::External => proxy.spec.credentials_secret_ref.as_ref()?.name.clone(),
    };
    Some(ObjectRef::new(&name).within(&proxy.namespace().unwrap_or_default()))
}

/// The labelled credentials Secrets, as the operator's watch last saw them.
#[derive(Clone)]
pub struct CredentialsCache {
    store: Store<Secret>,
}

impl std::fmt::Debug for CredentialsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialsCache")
            .field("secrets", &self.store.state().len())
            .finish()
    }
}

impl CredentialsCache {
    /// A cache reading `store`.
    pub fn new(store: Store<Secret>) -> Self {
        Self { store }
    }

    /// An empty cache that never fills: for tests and benchmarks without credentials.
    pub fn empty() -> Self {
        let (store, _writer) = reflector::store();
        Self { store }
    }

    /// The credentials of `proxy`, if it has a credentials Secret the cache holds.
    pub fn of(&self, proxy: &Proxy) -> Option<Credentials> {
        let secret = self.store.get(&secret_of(proxy)?)?;
        Credentials::from_secret(&secret)
    }
}

/// Fills `writer` with the Secrets labelled [`CREDENTIALS_SECRET_LABEL`]`=true` of `secrets`
/// until the task is dropped. Only labelled Secrets are watched, so the operator caches no
/// unrelated secret.
pub async fn watch(secrets: Api<Secret>, writer: reflector::store::Writer<Secret>) {
    let config = watcher::Config::default().labels(&format!("{CREDENTIALS_SECRET_LABEL}=true"));
    reflector::reflector(writer, watcher(secrets, config).default_backoff())
        .touched_objects()
        .for_each(|item| async move {
            if let Err(error) = item {
                tracing::warn!(%error, "watching the credentials Secrets (retrying)");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use sha_crypt::{PasswordHashRef, PasswordVerifier};

    use super::*;

    #[test]
    fn generated_passwords_are_random_hex_and_debug_hides_them() {
        let a = Credentials::generate("p1").unwrap();
        let b = Credentials::generate("p1").unwrap();
        assert_ne!(a.password(), b.password());
        assert_eq!(a.password().len(), 32);
        assert!(a.password().bytes().all(|c| c.is_ascii_hexdigit()));
        let shown = format!("{a:?}");
        assert!(!shown.contains(a.password()), "{shown}");
        assert!(shown.contains("p1"), "{shown}");
    }

    #[test]
    fn the_passwd_line_is_a_sha512_crypt_hash_of_the_password() {
        let credentials = Credentials::new("p1", "s3cret");
        let line = credentials.passwd_line().unwrap();
        let (user, hash) = line.trim_end().split_once(':').unwrap();
        assert_eq!(user, "p1");
        assert!(hash.starts_with("$6$rounds=1000$"), "{hash}");
        assert!(!line.contains("s3cret"));
        let hash = PasswordHashRef::new(hash).unwrap();
        ShaCrypt::SHA512.verify_password(b"s3cret", hash).unwrap();
        assert!(ShaCrypt::SHA512.verify_password(b"other", hash).is_err());
    }

    #[test]
    fn a_managed_proxy_has_the_issued_secret_and_an_external_one_the_one_it_names() {
        let proxy = |spec: serde_json::Value| -> Proxy {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
                "metadata": {"name": "p", "namespace": "crawl", "uid": "6b1f3c1e-0d2a-4c8e-9a57-1b0f2f3e4d5c"},
                "spec": spec,
            }))
            .unwrap()
        };
        let managed = proxy(serde_json::json!({"mode": "Managed", "provider": "pods"}));
        let named = secret_of(&managed).unwrap();
        assert_eq!(
            (named.name.as_str(), named.namespace.as_deref()),
            ("proxy-kbqzhquppopaia3n-credentials", Some("crawl"))
        );
        let endpoint = serde_json::json!({"host": "10.0.0.9", "port": 3128});
        let external = proxy(serde_json::json!({"mode": "External", "endpoint": endpoint,
            "credentialsSecretRef": {"name": "vendor-proxy"}}));
        assert_eq!(secret_of(&external).unwrap().name, "vendor-proxy");
        let open = proxy(serde_json::json!({"mode": "External", "endpoint": endpoint}));
        assert_eq!(secret_of(&open), None);
    }

    #[test]
    fn a_secret_round_trips_and_is_owned_and_labelled() {
        let credentials = Credentials::new("p1", "s3cret");
        let secret = secret("crawl", "proxy-x-credentials", "p1", "uid-1", &credentials).unwrap();
        assert_eq!(Credentials::from_secret(&secret), Some(credentials));
        assert_eq!(secret.labels()[CREDENTIALS_SECRET_LABEL], "true");
        let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Proxy", "uid-1")
        );
        let passwd = &secret.data.as_ref().unwrap()[PASSWD_KEY].0;
        assert!(String::from_utf8_lossy(passwd).starts_with("p1:$6$"));
        // A Secret without a password holds no credentials.
        let mut partial = secret.clone();
        partial.data.as_mut().unwrap().remove(PASSWORD_KEY);
        assert_eq!(Credentials::from_secret(&partial), None);
    }
}
