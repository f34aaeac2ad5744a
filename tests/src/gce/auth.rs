//! Service-account authentication, for the tests that give the operator a key file
//! ([`FakeGce::require_service_account`](super::FakeGce::require_service_account)).
//!
//! What `google-cloud-auth` 1.19 does with a service-account key file (Application Default
//! Credentials through `GOOGLE_APPLICATION_CREDENTIALS`): it never calls the key's
//! `token_uri`. Its service-account credentials sign a JWT with the key (RS256, `kid` the
//! key's `private_key_id`, `iss` and `sub` its `client_email`, `scope` cloud-platform, one
//! hour) and send it as the bearer token: a self-signed JWT, which Google APIs accept in
//! place of an OAuth access token. So the fake can check the real thing: every request
//! must carry a JWT that verifies with the key's public half, else GCE's 401. The key file
//! this module writes names a `token_uri` on a closed local port, so that a client that did
//! exchange the JWT for a token would fail.

use std::time::{SystemTime, UNIX_EPOCH};

use data_encoding::{BASE64URL_NOPAD, HEXLOWER};
use serde_json::{Value, json};
use tokio_rustls::rustls::crypto::aws_lc_rs::default_provider;
use tokio_rustls::rustls::pki_types::alg_id;

use super::errors::GceError;

/// A Google service account's JSON key, made here: an RSA 2048 key pair.
#[derive(Debug, Clone)]
pub struct ServiceAccountKey {
    /// The key file, as `gcloud iam service-accounts keys create` writes it.
    pub json: String,
    /// `client_email`.
    pub email: String,
    /// `private_key_id`.
    pub key_id: String,
    /// The public key (PKCS#1 `RSAPublicKey`, DER).
    public_key: Vec<u8>,
}

impl ServiceAccountKey {
    /// A new key of service account `name` in `project`.
    pub fn generate(project: &str, name: &str) -> anyhow::Result<Self> {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256)?;
        let email = format!("{name}@{project}.iam.gserviceaccount.com");
        // 40 hex digits, as GCE's: the modulus's last 20 bytes (before the exponent's 5).
        let public_key = pair.public_key_raw().to_vec();
        let key_id = HEXLOWER.encode(&public_key[public_key.len() - 25..public_key.len() - 5]);
        let json = json!({
            "type": "service_account",
            "project_id": project,
            "private_key_id": key_id,
            "private_key": pair.serialize_pem(),
            "client_email": email,
            "client_id": "100000000000000000001",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            // Never called (see the module's doc): a closed port, so a call would fail.
            "token_uri": "http://127.0.0.1:9/token",
            "universe_domain": "googleapis.com",
        })
        .to_string();
        Ok(Self {
            json,
            email,
            key_id,
            public_key,
        })
    }

    /// `Ok` when `authorization` (the request's header) is a bearer JWT this key signed for
    /// its service account, unexpired; GCE's 401 otherwise, and why (for the test's log).
    pub(super) fn check(&self, authorization: Option<&str>) -> Result<(), (GceError, String)> {
        let refuse = |why: String| (GceError::unauthenticated(), why);
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .ok_or_else(|| refuse(format!("no bearer token: {authorization:?}")))?;
        let parts: Vec<&str> = token.split('.').collect();
        let [header, claims, signature] = parts.as_slice() else {
            return Err(refuse(format!("not a JWT: {token}")));
        };
        let decode = |part: &str| -> Result<Vec<u8>, (GceError, String)> {
            BASE64URL_NOPAD
                .decode(part.as_bytes())
                .map_err(|e| refuse(format!("JWT part {part}: {e}")))
        };
        let parse = |part: &str| -> Result<Value, (GceError, String)> {
            serde_json::from_slice(&decode(part)?).map_err(|e| refuse(format!("JWT JSON: {e}")))
        };
        let (header_json, claims_json) = (parse(header)?, parse(claims)?);
        if header_json["alg"] != "RS256" || header_json["kid"] != self.key_id.as_str() {
            return Err(refuse(format!("JWT header {header_json}")));
        }
        if claims_json["iss"] != self.email.as_str() || claims_json["sub"] != self.email.as_str() {
            return Err(refuse(format!("JWT claims {claims_json}")));
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let exp = claims_json["exp"].as_u64().unwrap_or(0);
        let iat = claims_json["iat"].as_u64().unwrap_or(u64::MAX);
        if exp <= now || iat > now + 60 {
            return Err(refuse(format!(
                "JWT expired or from the future: {claims_json}"
            )));
        }
        let rsa = default_provider()
            .signature_verification_algorithms
            .all
            .iter()
            .find(|a| {
                a.public_key_alg_id() == alg_id::RSA_ENCRYPTION
                    && a.signature_alg_id() == alg_id::RSA_PKCS1_SHA256
            })
            .ok_or_else(|| refuse("no RS256 verifier in aws-lc-rs".to_owned()))?;
        rsa.verify_signature(
            &self.public_key,
            format!("{header}.{claims}").as_bytes(),
            &decode(signature)?,
        )
        .map_err(|_| refuse("JWT signature does not verify with the key".to_owned()))
    }
}
