//! Certificates a test makes for the TLS servers it starts: a certificate authority of its own
//! and a server certificate it signs for `127.0.0.1` and `localhost`, as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::private_server::Account;

/// Where a server's TLS files lie: the CA that signed its certificate, the certificate, its key.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate authority's certificate: what a client trusts to verify the server.
    pub ca: PathBuf,
    pub(crate) certificate: PathBuf,
    pub(crate) key: PathBuf,
}

impl TlsFiles {
    /// Makes a fresh CA and a server certificate it signs, and writes them into `dir`, readable
    /// by `account` alone (a PostgreSQL server refuses a key others can read).
    pub(crate) fn create(dir: &Path, account: Option<Account>) -> Self {
        let mut authority = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        authority.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        (authority.distinguished_name).push(DnType::CommonName, "tower-lock test CA");
        let authority =
            CertifiedIssuer::self_signed(authority, KeyPair::generate().expect("a key"))
                .expect("the CA signs itself");
        let server = CertificateParams::new(["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server parameters");
        let key = KeyPair::generate().expect("a key");
        let certificate = server.signed_by(&key, &authority).expect("the CA signs");
        let files = Self {
            ca: dir.join("ca.pem"),
            certificate: dir.join("server.pem"),
            key: dir.join("server.key"),
        };
        write(&files.ca, &authority.pem(), account);
        write(&files.certificate, &certificate.pem(), account);
        write(&files.key, &key.serialize_pem(), account);
        files
    }
}

fn write(path: &Path, contents: &str, account: Option<Account>) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, contents).expect("a TLS file is written");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    if let Some(account) = account {
        std::os::unix::fs::chown(path, Some(account.uid), Some(account.gid)).expect("chown");
    }
}
