//! Fresh certificates for each run: a CA kept separate from the serving certificates
//! (rustls rejects a CA certificate used as an end-entity one).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate authority that signs the bed's certificates.
#[derive(Debug)]
pub struct Ca {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate with its private key, both PEM.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The PKCS#8 private key, PEM.
    pub key_pem: String,
}

impl Ca {
    /// A new CA with the given common name.
    pub fn new(common_name: &str) -> Self {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("generate a CA key");
        let cert = params.self_signed(&key).expect("self-sign the CA");
        Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for these DNS names and IP addresses.
    pub fn server(&self, names: &[&str]) -> Leaf {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().expect("a valid DNS name")),
            })
            .collect();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate with this common name and organisation (Kubernetes reads them as
    /// user and group).
    pub fn client(&self, common_name: &str, organization: &str) -> Leaf {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, organization);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Leaf {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().expect("generate a key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign a certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}
