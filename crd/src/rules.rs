//! The CEL rules the API server checks on every write of a Proxy, with their messages.
//!
//! Kept as constants so the derive, the unit tests and the API-server tests all name the same
//! rule and expect the same message. The API server skips any rule that mentions `oldSelf` on
//! create, so the immutability rules never carry a required-iff check with them.
//!
//! Rules on one field sit on that field (or carry a `fieldPath`), so the API server's
//! refusal starts with the field's path, for example `spec.healthCheck.probeURL: Invalid
//! value: ...`. Formats are checked with `matches()` on anchored regular expressions rather
//! than with Kubernetes' `url()`/`isURL()`: RE2 (the API server) and the `regex` crate (the
//! local evaluator of the unit tests) agree on these expressions, while the two URL libraries
//! disagree on edge cases. Every string a rule reads has a `maxLength`, which keeps the API
//! server's cost estimate of the rule within its budget.

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

/// `credentialsSecretRef` only for External proxies: the operator issues a Managed proxy's.
pub const CREDENTIALS_FORBIDDEN: &str = "self.mode != 'Managed' || !has(self.credentialsSecretRef)";
/// Message of [`CREDENTIALS_FORBIDDEN`].
pub const CREDENTIALS_FORBIDDEN_MSG: &str = "credentialsSecretRef must not be set when mode is Managed: the operator issues a Managed proxy's credentials itself";

/// Exactly one source of cloud-init (CEL `!=` on booleans is exclusive or).
pub const CLOUD_INIT_EXACTLY_ONE: &str = "has(self.inline) != has(self.secretRef)";
/// Message of [`CLOUD_INIT_EXACTLY_ONE`].
pub const CLOUD_INIT_EXACTLY_ONE_MSG: &str = "exactly one of inline and secretRef must be set";

/// A probe must end before the next one is due: the engine never starts a probe of a proxy
/// while the previous one still runs, so a timeout as long as the interval would skip every
/// other probe of a hung proxy. On `healthCheck`, reported at `timeoutSeconds`; the API
/// server applies the defaults (5 and 30) first, so an `intervalSeconds` of 5 or less needs
/// an explicit `timeoutSeconds` below it.
///
/// The `has()` guards are for the CRD's own `default: {}` of `healthCheck`, which the API
/// server checks against this rule as it stands, before filling its fields' defaults: every
/// stored object has both fields.
pub const TIMEOUT_BELOW_INTERVAL: &str = "!has(self.timeoutSeconds) || !has(self.intervalSeconds) || self.timeoutSeconds < self.intervalSeconds";
/// Message of [`TIMEOUT_BELOW_INTERVAL`].
pub const TIMEOUT_BELOW_INTERVAL_MSG: &str = "timeoutSeconds must be smaller than intervalSeconds (a probe must end before the next one is due)";

/// One DNS label as hosts are written (RFC 1123, either case): letters, digits and inner
/// hyphens, 1 to 63 characters.
macro_rules! dns_label {
    () => {
        "[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
    };
}

/// A host name: DNS labels joined by dots (written `\\.` so that CEL's string literal hands
/// the regular expression `\.`).
macro_rules! host_name {
    () => {
        concat!(dns_label!(), r"(\\.", dns_label!(), ")*")
    };
}

/// A TCP port, 1 to 65535, without leading zeros.
macro_rules! port {
    () => {
        "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
    };
}

/// `healthCheck.probeURL` is an absolute `http` or `https` URL with a host (a DNS name, an
/// IPv4 address or a bracketed IPv6 address), an optional port, and an optional path, query
/// or fragment of printable ASCII without spaces.
pub const PROBE_URL_VALID: &str = concat!(
    "self.matches('(?i)^https?://(",
    host_name!(),
    r"|\\[[0-9a-f:.]+\\])(:",
    port!(),
    ")?([/?#][!-~]*)?$')"
);
/// Message of [`PROBE_URL_VALID`].
pub const PROBE_URL_VALID_MSG: &str = "probeURL must be an absolute http:// or https:// URL with a host, for example https://www.gstatic.com/generate_204";

/// `healthCheck.egressURL` is an absolute `http` or `https` URL with a host, as
/// [`PROBE_URL_VALID`] says of `probeURL`.
pub const EGRESS_URL_VALID: &str = PROBE_URL_VALID;
/// Message of [`EGRESS_URL_VALID`].
pub const EGRESS_URL_VALID_MSG: &str = "egressURL must be an absolute http:// or https:// URL with a host, answering the client's address, for example https://checkip.amazonaws.com";

/// Every `healthCheck.egressCIDRs` entry is an IPv4 or IPv6 range, `address/bits`.
pub const EGRESS_CIDRS_VALID: &str = "self.all(c, isCIDR(c))";
/// Message of [`EGRESS_CIDRS_VALID`].
pub const EGRESS_CIDRS_VALID_MSG: &str =
    "egressCIDRs must hold address ranges such as 203.0.113.0/24 or 2001:db8::/32";

/// `endpoint.host` is an IP address or a DNS name, nothing more: no scheme, port, path or
/// space. A name whose last label is a number (or `0x` and hex digits) is refused too, since
/// URL parsers read it as a malformed IPv4 address.
pub const ENDPOINT_HOST_VALID: &str = concat!(
    "isIP(self) || (self.matches('^",
    host_name!(),
    r"$') && !self.matches('(^|\\.)([0-9]+|0[xX][0-9a-fA-F]*)$'))"
);
/// Message of [`ENDPOINT_HOST_VALID`].
pub const ENDPOINT_HOST_VALID_MSG: &str =
    "host must be a DNS name or an IP address, without a scheme, port or path";

/// `provider` is a DNS-1123 label, as every provider name in the providers config is: any
/// other value can never name a provider.
pub const PROVIDER_NAME_VALID: &str = "self.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')";
/// Message of [`PROVIDER_NAME_VALID`].
pub const PROVIDER_NAME_VALID_MSG: &str = "provider must be the name of a provider in the operator's providers config: lowercase letters, digits and '-', at most 63 characters";

/// `secretRef.name` is a Secret name (a lowercase DNS-1123 subdomain).
pub const SECRET_NAME_VALID: &str =
    r"self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";
/// Message of [`SECRET_NAME_VALID`].
pub const SECRET_NAME_VALID_MSG: &str =
    "name must be a Secret name: lowercase letters, digits, '-' and '.'";

/// `secretRef.key` is a key a Secret's data can hold.
pub const SECRET_KEY_VALID: &str = "self.matches('^[-._a-zA-Z0-9]+$')";
/// Message of [`SECRET_KEY_VALID`].
pub const SECRET_KEY_VALID_MSG: &str =
    "key must be a Secret data key: letters, digits, '-', '_' and '.'";

/// A pool's template makes Managed Proxies: a pool creates its proxies' machines.
pub const POOL_TEMPLATE_MANAGED: &str = "self.template.spec.mode == 'Managed'";
/// Message of [`POOL_TEMPLATE_MANAGED`].
pub const POOL_TEMPLATE_MANAGED_MSG: &str =
    "template.spec.mode must be Managed: a pool creates the machines of its proxies";

/// Every Proxy of a pool has a provider: the template's, or its spread entry's.
pub const POOL_PROVIDER_GIVEN: &str = "has(self.template.spec.provider) || (has(self.spread) && size(self.spread) > 0 && self.spread.all(s, has(s.provider)))";
/// Message of [`POOL_PROVIDER_GIVEN`].
pub const POOL_PROVIDER_GIVEN_MSG: &str =
    "template.spec.provider is required unless every spread entry names a provider";

/// A count or a percentage: a non-negative integer (or its digits as a string), or up to
/// three digits followed by `%`.
pub const INT_OR_PERCENT_VALID: &str = "string(self).matches('^([0-9]+|[0-9]{1,3}%)$')";
/// Message of [`INT_OR_PERCENT_VALID`].
pub const INT_OR_PERCENT_VALID_MSG: &str =
    "must be a non-negative count such as 2, or a percentage such as \"25%\"";

/// Autoscale's bounds are in order.
pub const AUTOSCALE_BOUNDS: &str = "self.minReplicas <= self.maxReplicas";
/// Message of [`AUTOSCALE_BOUNDS`].
pub const AUTOSCALE_BOUNDS_MSG: &str = "autoscale.minReplicas must not exceed maxReplicas";

/// Every rule with its message, in the order the CRD lists them.
pub const ALL: [(&str, &str); 16] = [
    (MODE_IMMUTABLE, MODE_IMMUTABLE_MSG),
    (PROVIDER_IMMUTABLE, PROVIDER_IMMUTABLE_MSG),
    (PROVIDER_REQUIRED, PROVIDER_REQUIRED_MSG),
    (PROVIDER_FORBIDDEN, PROVIDER_FORBIDDEN_MSG),
    (ENDPOINT_REQUIRED, ENDPOINT_REQUIRED_MSG),
    (ENDPOINT_FORBIDDEN, ENDPOINT_FORBIDDEN_MSG),
    (CREDENTIALS_FORBIDDEN, CREDENTIALS_FORBIDDEN_MSG),
    (CLOUD_INIT_EXACTLY_ONE, CLOUD_INIT_EXACTLY_ONE_MSG),
    (SECRET_NAME_VALID, SECRET_NAME_VALID_MSG),
    (SECRET_KEY_VALID, SECRET_KEY_VALID_MSG),
    (ENDPOINT_HOST_VALID, ENDPOINT_HOST_VALID_MSG),
    (TIMEOUT_BELOW_INTERVAL, TIMEOUT_BELOW_INTERVAL_MSG),
    (PROBE_URL_VALID, PROBE_URL_VALID_MSG),
    (EGRESS_URL_VALID, EGRESS_URL_VALID_MSG),
    (EGRESS_CIDRS_VALID, EGRESS_CIDRS_VALID_MSG),
    (PROVIDER_NAME_VALID, PROVIDER_NAME_VALID_MSG),
];
