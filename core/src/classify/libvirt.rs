//! libvirt answers, by their `virErrorNumber`
//! (<https://libvirt.org/html/libvirt-virterror.html#virErrorNumber>).
//!
//! | code | class |
//! |---|---|
//! | `AUTH_FAILED`, `AUTH_CANCELLED`, `AUTH_UNAVAILABLE`, `ACCESS_DENIED`, `OPERATION_DENIED` | refused: the host does not let the operator in |
//! | `NO_STORAGE_POOL`, `NO_NETWORK`, `NO_SUPPORT`, `CONFIG_UNSUPPORTED`, `OPERATION_UNSUPPORTED`, `NO_SECURITY_MODEL` | refused: the host lacks what the providers config names or needs |
//! | `NO_MEMORY` | stockout: the host has no room for the machine now |
//! | `XML_ERROR`, `XML_DETAIL`, `XML_INVALID_SCHEMA`, `INVALID_ARG`, `CPU_INCOMPATIBLE` | permanent: the machine the Proxy asks for cannot be defined |
//! | `OPERATION_INVALID`, `RESOURCE_BUSY`, `OPERATION_TIMEOUT`, `AGENT_UNRESPONSIVE`, `DOM_EXIST`, `STORAGE_VOL_EXIST`: a domain or volume mid-transition | transient |
//! | anything else (`SYSTEM_ERROR`, `RPC`, `NO_CONNECT`, `INTERNAL_ERROR`, `OPERATION_FAILED`, ...) | transient |
//!
//! `NO_DOMAIN` and `NO_STORAGE_VOL` of a lookup are not errors: the provider answers them as
//! "not found" before anything is classified (and names `spec.placement.image` itself when
//! the Proxy's base image is missing).

use crate::error::ProviderError;

/// A failed libvirt call: its `virErrorNumber`, its message, and where it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibvirtAnswer {
    /// The `virErrorNumber` of the error.
    pub code: u32,
    /// libvirt's message.
    pub message: String,
    /// The host (the providers config's `kvm.hosts[].name`) the call went to.
    pub host: String,
    /// What the provider was doing (`define domain`, `start domain`).
    pub what: String,
}

/// `virErrorNumber` values the table names.
mod code {
    pub const NO_MEMORY: u32 = 2;
    pub const NO_SUPPORT: u32 = 3;
    pub const INVALID_ARG: u32 = 8;
    pub const XML_ERROR: u32 = 27;
    pub const DOM_EXIST: u32 = 28;
    pub const OPERATION_DENIED: u32 = 29;
    pub const XML_DETAIL: u32 = 35;
    pub const NO_NETWORK: u32 = 43;
    pub const AUTH_FAILED: u32 = 45;
    pub const NO_STORAGE_POOL: u32 = 49;
    pub const NO_SECURITY_MODEL: u32 = 54;
    pub const OPERATION_INVALID: u32 = 55;
    pub const CONFIG_UNSUPPORTED: u32 = 67;
    pub const OPERATION_TIMEOUT: u32 = 68;
    pub const AUTH_CANCELLED: u32 = 79;
    pub const OPERATION_UNSUPPORTED: u32 = 84;
    pub const AGENT_UNRESPONSIVE: u32 = 86;
    pub const RESOURCE_BUSY: u32 = 87;
    pub const ACCESS_DENIED: u32 = 88;
    pub const STORAGE_VOL_EXIST: u32 = 90;
    pub const CPU_INCOMPATIBLE: u32 = 91;
    pub const XML_INVALID_SCHEMA: u32 = 92;
    pub const AUTH_UNAVAILABLE: u32 = 94;
}

impl LibvirtAnswer {
    /// The class of this answer (see the module's table), with a message naming the host.
    pub fn classify(&self) -> ProviderError {
        let described = format!(
            "host {}: {}: {} (libvirt error {})",
            self.host, self.what, self.message, self.code
        );
        match self.code {
            code::AUTH_FAILED
            | code::AUTH_CANCELLED
            | code::AUTH_UNAVAILABLE
            | code::ACCESS_DENIED
            | code::OPERATION_DENIED => ProviderError::refused(format!(
                "{described}; the host does not let the operator in"
            )),
            code::NO_STORAGE_POOL
            | code::NO_NETWORK
            | code::NO_SUPPORT
            | code::CONFIG_UNSUPPORTED
            | code::OPERATION_UNSUPPORTED
            | code::NO_SECURITY_MODEL => ProviderError::refused(format!(
                "{described}; fix the host or its entry in the providers config"
            )),
            code::NO_MEMORY => ProviderError::stockout(Some(self.host.clone()), described),
            code::XML_ERROR
            | code::XML_DETAIL
            | code::XML_INVALID_SCHEMA
            | code::INVALID_ARG
            | code::CPU_INCOMPATIBLE => ProviderError::permanent(format!(
                "spec.placement: the host cannot define this machine: {described}"
            )),
            code::OPERATION_INVALID
            | code::RESOURCE_BUSY
            | code::OPERATION_TIMEOUT
            | code::AGENT_UNRESPONSIVE
            | code::DOM_EXIST
            | code::STORAGE_VOL_EXIST => ProviderError::transient(described),
            _ => ProviderError::transient(described),
        }
    }
}
