//! The CEL rules the API server checks on every write of a Proxy, with their messages.
//!
//! Kept as constants so the derive, the unit tests and the API-server tests all name the same
//! rule and expect the same message. The API server skips any rule that mentions `oldSelf` on
//! create, so the immutability rules never carry a required-iff check with them.

/// `mode` cannot change once the Proxy exists.
pub const MODE_IMMUTABLE: &str = "self.mode == oldSelf.mode";
/// Message of [`MODE_IMMUTABLE`].
pub const MODE_IMMUTABLE_MSG: &str = "mode is immutable";

/// `provider` cannot be set, unset or changed once the Proxy exists. Written with `has()` on
/// both sides because the field is optional: a field-level rule would not run when it is
/// absent on one side.
pub const PROVIDER_IMMUTABLE: &str = "has(self.provider) == has(oldSelf.provider) && (!has(self.provider) || self.provider == oldSelf.provider)";
/// Message of [`PROVIDER_IMMUTABLE`].
pub const PROVIDER_IMMUTABLE_MSG: &str = "provider is immutable";

/// A Managed proxy names the provider that creates its machine.
pub const PROVIDER_REQUIRED: &str = "self.mode != 'Managed' || has(self.provider)";
/// Message of [`PROVIDER_REQUIRED`].
pub const PROVIDER_REQUIRED_MSG: &str = "provider is required when mode is Managed";

/// An External proxy has no provider.
pub const PROVIDER_FORBIDDEN: &str = "self.mode != 'External' || !has(self.provider)";
/// Message of [`PROVIDER_FORBIDDEN`].
pub const PROVIDER_FORBIDDEN_MSG: &str = "provider must not be set when mode is External";

/// An External proxy says where it is.
pub const ENDPOINT_REQUIRED: &str = "self.mode != 'External' || has(self.endpoint)";
/// Message of [`ENDPOINT_REQUIRED`].
pub const ENDPOINT_REQUIRED_MSG: &str = "endpoint is required when mode is External";

/// A Managed proxy's address comes from its machine, never from the spec.
pub const ENDPOINT_FORBIDDEN: &str = "self.mode != 'Managed' || !has(self.endpoint)";
/// Message of [`ENDPOINT_FORBIDDEN`].
pub const ENDPOINT_FORBIDDEN_MSG: &str = "endpoint must not be set when mode is Managed";

/// Exactly one source of cloud-init (CEL `!=` on booleans is exclusive or).
pub const CLOUD_INIT_EXACTLY_ONE: &str = "has(self.inline) != has(self.secretRef)";
/// Message of [`CLOUD_INIT_EXACTLY_ONE`].
pub const CLOUD_INIT_EXACTLY_ONE_MSG: &str = "exactly one of inline and secretRef must be set";

/// Every rule with its message, in the order the CRD lists them.
pub const ALL: [(&str, &str); 7] = [
    (MODE_IMMUTABLE, MODE_IMMUTABLE_MSG),
    (PROVIDER_IMMUTABLE, PROVIDER_IMMUTABLE_MSG),
    (PROVIDER_REQUIRED, PROVIDER_REQUIRED_MSG),
    (PROVIDER_FORBIDDEN, PROVIDER_FORBIDDEN_MSG),
    (ENDPOINT_REQUIRED, ENDPOINT_REQUIRED_MSG),
    (ENDPOINT_FORBIDDEN, ENDPOINT_FORBIDDEN_MSG),
    (CLOUD_INIT_EXACTLY_ONE, CLOUD_INIT_EXACTLY_ONE_MSG),
];
