//! The tenants and their tokens: the password of a gateway username `user-<tenant>-...` must
//! be its tenant's token.
//!
//! They come from a directory (`--tenants-dir`), one file per tenant: the file's name is the
//! tenant, its content (trimmed) the token. That is what a Kubernetes Secret mounted as a
//! volume looks like (one key per tenant), and kubelet updates the files in place when the
//! Secret changes, so the directory is read again every [`RELOAD`]: a tenant added or a token
//! rotated takes effect without a restart. Names starting with `.` (the volume's own
//! `..data` links) are skipped. Tokens are kept as SHA-256 digests and compared in constant
//! time; an unknown tenant costs the same comparison, so timing does not tell tenants apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use proxy_core::gateway::username::is_tenant_name;
use sha2::{Digest, Sha256};

/// How often the directory is read again.
pub const RELOAD: Duration = Duration::from_secs(10);

/// Token digests by tenant.
type Digests = BTreeMap<String, [u8; 32]>;

/// The tenants' token digests, shared by every connection and swapped whole on a reload.
#[derive(Debug, Clone, Default)]
pub struct Tenants {
    digests: Arc<RwLock<Arc<Digests>>>,
}

impl Tenants {
    /// The tenants of `dir`, or every problem with it (an unreadable file, a file name that
    /// is not a tenant name, an empty token).
    pub fn load(dir: &Path) -> Result<Self, String> {
        let tenants = Self::default();
        tenants.replace(read(dir)?);
        Ok(tenants)
    }

    /// Tenants with these tokens (tests, benchmarks).
    pub fn of<'a>(tokens: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let tenants = Self::default();
        tenants.replace(
            tokens
                .into_iter()
                .map(|(tenant, token)| (tenant.to_owned(), digest(token)))
                .collect(),
        );
        tenants
    }

    fn replace(&self, digests: Digests) {
        let mut slot = self
            .digests
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Arc::new(digests);
    }

    /// How many tenants there are.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn current(&self) -> Arc<Digests> {
        self.digests
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether `token` is the token of `tenant`.
    pub fn accepts(&self, tenant: &str, token: &str) -> bool {
        let tenants = self.current();
        let presented = digest(token);
        let (expected, known) = match tenants.get(tenant) {
            Some(expected) => (*expected, true),
            // The same work for an unknown tenant.
            None => ([0xa5; 32], false),
        };
        let equal: bool = subtle::ConstantTimeEq::ct_eq(&presented[..], &expected[..]).into();
        equal && known
    }

    /// Reads `dir` again every [`RELOAD`] until the task is dropped; a directory that cannot
    /// be read keeps the tenants of the last good read, and says why.
    pub async fn reload(self, dir: PathBuf) {
        let mut tick = tokio::time::interval(RELOAD);
        tick.tick().await;
        loop {
            tick.tick().await;
            match read(&dir) {
                Ok(digests) => {
                    if *self.current() != digests {
                        tracing::info!(tenants = digests.len(), "gateway tenants reloaded");
                        self.replace(digests);
                    }
                }
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "gateway tenants not reloaded; keeping the last ones");
                }
            }
        }
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The digests of the tokens in `dir`, by tenant.
fn read(dir: &Path) -> Result<Digests, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut digests = BTreeMap::new();
    let mut problems = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') || path.is_dir() {
            continue;
        }
        if !is_tenant_name(&name) {
            problems.push(format!(
                "{}: {name:?} is not a tenant name (1 to 63 of a-z, 0-9 and '_')",
                path.display()
            ));
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(token) if !token.trim().is_empty() => {
                digests.insert(name, digest(token.trim()));
            }
            Ok(_) => problems.push(format!("{}: the token is empty", path.display())),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    if problems.is_empty() {
        Ok(digests)
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_token_files_is_the_tenants() {
        let dir = std::env::temp_dir().join(format!("tenants-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("..2026_12_05")).unwrap();
        std::fs::write(dir.join("acme"), "s3cret\n").unwrap();
        std::fs::write(dir.join("beta_2"), "other").unwrap();
        std::fs::write(dir.join("..data"), "ignored").unwrap();
        let tenants = Tenants::load(&dir).unwrap();
        assert_eq!(tenants.len(), 2);
        assert!(tenants.accepts("acme", "s3cret"));
        assert!(!tenants.accepts("acme", "other"));
        assert!(!tenants.accepts("nobody", "s3cret"));
        std::fs::write(dir.join("Bad-Name"), "x").unwrap();
        std::fs::write(dir.join("empty"), " \n").unwrap();
        let refused = Tenants::load(&dir).unwrap_err();
        assert!(
            refused.contains("\"Bad-Name\" is not a tenant name"),
            "{refused}"
        );
        assert!(refused.contains("empty: the token is empty"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
