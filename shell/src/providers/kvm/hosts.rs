//! One libvirt connection per host: dialled on first use, not at start (a host that is down
//! must not stop the operator), and dropped after a failure that leaves it dead, so that the
//! next call dials again.

use std::sync::{Arc, Mutex, PoisonError};

use proxy_core::ProviderError;
use proxy_core::classify::LibvirtAnswer;
use virt::connect::Connect;
use virt::enumutil::{Enum, RawEnum};

use crate::providers::settings::KvmHost;

/// A libvirt host and its connection.
pub struct Host {
    /// The host's settings.
    pub settings: KvmHost,
    connection: Mutex<Option<Arc<Connect>>>,
    /// Held while an address is chosen and the domain that holds it is defined, so that two
    /// creates on one host never pick the same address.
    pub allocation: Mutex<()>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.settings.name)
            .field("uri", &self.settings.uri)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A host that has not been dialled yet.
    pub fn new(settings: KvmHost) -> Self {
        Self {
            settings,
            connection: Mutex::new(None),
            allocation: Mutex::new(()),
        }
    }

    /// Runs `call` (blocking) with the host's connection, dialling it when there is none.
    /// When `call` fails and the connection is no longer alive, it is dropped: the next call
    /// redials.
    pub fn with<T>(
        &self,
        call: impl FnOnce(&Connect) -> Result<T, ProviderError>,
    ) -> Result<T, ProviderError> {
        let connection = self.connection()?;
        let result = call(&connection);
        if result.is_err() && !connection.is_alive().unwrap_or(false) {
            tracing::info!(host = %self.settings.name, "libvirt connection lost: redialling on the next call");
            self.connection
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take_if(|held| Arc::ptr_eq(held, &connection));
        }
        result
    }

    fn connection(&self) -> Result<Arc<Connect>, ProviderError> {
        let mut held = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(connection) = held.as_ref() {
            return Ok(connection.clone());
        }
        // libvirt's default error handler prints every error to stderr; ours are returned.
        virt::error::clear_error_callback();
        // No connection is no answer at all (an unknown host, a refused port, an ssh that
        // cannot log in): a provider check that meets it marks the provider down at once.
        let connection = Arc::new(Connect::open(Some(&self.settings.uri)).map_err(|e| {
            ProviderError::unreachable(format!(
                "host {}: cannot connect to {}: {}",
                self.settings.name,
                self.settings.uri,
                e.message()
            ))
        })?);
        *held = Some(connection.clone());
        Ok(connection)
    }

    /// A libvirt failure of `what` on this host, classified by the core from its error
    /// number ([`LibvirtAnswer`]): a refusal of the operator or a host that lacks what the
    /// providers config names makes the provider unhealthy, a full host is a stockout, a
    /// domain mid-transition is transient.
    pub fn error(&self, what: &str, error: &virt::error::Error) -> ProviderError {
        let code = match error.code() {
            Enum::Known(number) => number.to_raw(),
            Enum::Unknown(raw) => raw,
        };
        LibvirtAnswer {
            code,
            message: error.message().to_owned(),
            host: self.settings.name.clone(),
            what: what.to_owned(),
        }
        .classify()
    }
}
