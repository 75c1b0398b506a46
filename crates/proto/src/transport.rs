//! How Muster's processes reach each other. Every connection a client, worker or master
//! opens is made by a [`Dialer`]: plain HTTP/2, or TLS that verifies the server's certificate
//! against the cluster's CA. A master with a certificate and key serves TLS only. Every
//! server accepts through [`incoming`].

use std::path::{Path, PathBuf};

use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

/// The connections a gRPC server accepts on `listener`, with Nagle's algorithm off: a small
/// answer must not wait for the peer's delayed acknowledgement (40 ms on Linux).
pub fn incoming(listener: tokio::net::TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// The TLS files a process is given: `--tls-cert` and `--tls-key` to serve, `--tls-ca` to
/// verify the masters it calls.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    /// The PEM certificate (chain) a master serves.
    pub cert: Option<PathBuf>,
    /// Its PEM private key.
    pub key: Option<PathBuf>,
    /// The PEM CA certificate that signed the masters' certificates.
    pub ca: Option<PathBuf>,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Throw-away certificates could not be made.
    #[error("cannot make certificates: {0}")]
    Generate(String),
    /// A file cannot be read, or holds no certificate or key.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A certificate made here cannot be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Some files were given without the others they need.
    #[error("{0}")]
    Incomplete(&'static str),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

impl TlsFiles {
    /// Makes a throw-away CA and one certificate it signs for `names` (host names or IP
    /// addresses), written as `ca.pem`, `cert.pem` and `key.pem` (readable by its owner only)
    /// in `dir`: TLS for a local cluster or a test, never for production.
    ///
    /// # Errors
    ///
    /// The certificates cannot be made or the files written.
    pub fn generate(dir: &Path, names: &[&str]) -> Result<Self, TlsError> {
        let pems = ThrowawayTls::new(names)?;
        let files = Self {
            cert: Some(dir.join("cert.pem")),
            key: Some(dir.join("key.pem")),
            ca: Some(dir.join("ca.pem")),
        };
        let write = |path: &Path, content: &str, mode: u32| {
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(mode)
                .open(path)
                .and_then(|mut file| file.write_all(content.as_bytes()))
                .map_err(|source| TlsError::Write {
                    path: path.to_owned(),
                    source,
                })
        };
        write(files.ca.as_deref().expect("set above"), &pems.ca, 0o644)?;
        write(files.cert.as_deref().expect("set above"), &pems.cert, 0o644)?;
        write(files.key.as_deref().expect("set above"), &pems.key, 0o600)?;
        Ok(files)
    }

    /// How this process dials: TLS against the CA when one is given, plain otherwise.
    ///
    /// # Errors
    ///
    /// The CA file cannot be read.
    pub fn dialer(&self) -> Result<Dialer, TlsError> {
        let Some(ca) = &self.ca else {
            return Ok(Dialer::plain());
        };
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
        Ok(Dialer(Some(config)))
    }

    /// What a master serves with: TLS with its certificate and key when both are given.
    ///
    /// # Errors
    ///
    /// A file cannot be read, or a certificate comes without its key, or without the CA that
    /// verifies the other masters.
    pub fn server(&self) -> Result<Option<ServerTlsConfig>, TlsError> {
        match (&self.cert, &self.key, &self.ca) {
            (None, None, _) => Ok(None),
            (Some(cert), Some(key), Some(_)) => Ok(Some(
                ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?)),
            )),
            (Some(_), Some(_), None) => Err(TlsError::Incomplete(
                "--tls-cert needs --tls-ca too, to verify the other masters",
            )),
            _ => Err(TlsError::Incomplete("--tls-cert and --tls-key go together")),
        }
    }

    /// The TLS acceptor for a master's HTTP status page: its certificate and key, when given.
    ///
    /// # Errors
    ///
    /// A file cannot be read or parsed.
    pub fn https(&self) -> Result<Option<tokio_rustls::TlsAcceptor>, TlsError> {
        use tokio_rustls::rustls::ServerConfig;
        use tokio_rustls::rustls::pki_types::pem::PemObject as _;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (Some(cert), Some(key)) = (&self.cert, &self.key) else {
            return Ok(None);
        };
        let bad = |path: &Path, error: String| TlsError::Read {
            path: path.to_owned(),
            source: std::io::Error::other(error),
        };
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(cert, e.to_string()))?;
        let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, e.to_string()))?;
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .map_err(|e| bad(cert, e.to_string()))?;
        Ok(Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(
            config,
        ))))
    }
}

/// A throw-away CA and one certificate it signs, in memory, as PEM: for `muster dev` and
/// tests (written out by [`TlsFiles::generate`]), and for a driver's task link, whose
/// executors are handed the CA to know it is their driver they reach.
pub struct ThrowawayTls {
    /// The CA certificate.
    pub ca: String,
    /// The certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
}

impl ThrowawayTls {
    /// A new CA and a certificate for `names` (host names or IP addresses).
    ///
    /// # Errors
    ///
    /// The certificates cannot be made.
    pub fn new(names: &[&str]) -> Result<Self, TlsError> {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
        let failed = |e: rcgen::Error| TlsError::Generate(e.to_string());
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "muster throw-away CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(failed)?)
            .map_err(failed)?;
        let key = KeyPair::generate().map_err(failed)?;
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let cert = CertificateParams::new(names)
            .map_err(failed)?
            .signed_by(&key, &ca)
            .map_err(failed)?;
        Ok(Self {
            ca: ca.pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// The server side: serve with the certificate.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key))
    }
}

/// How a process opens connections: plain, or TLS verified against the cluster's CA.
#[derive(Clone, Debug, Default)]
pub struct Dialer(Option<ClientTlsConfig>);

impl Dialer {
    /// Plain HTTP/2: for a cluster without TLS.
    pub fn plain() -> Self {
        Self(None)
    }

    /// TLS that trusts only the CA in `pem`.
    pub fn trusting(pem: &str) -> Self {
        Self(Some(
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
        ))
    }

    /// Whether connections use TLS.
    pub fn is_tls(&self) -> bool {
        self.0.is_some()
    }

    /// What to tell the user when a call of this dialer's to `addr` failed with `status`
    /// because the two ends speak differently: a plain dialer whose HTTP/2 was answered with
    /// something else (TLS, most likely). `None` for any other failure.
    pub fn mismatch(&self, status: &tonic::Status, addr: &str) -> Option<String> {
        let garbled = status.code() == tonic::Code::Internal
            && std::error::Error::source(status).is_some()
            && status.message().starts_with("h2 protocol error");
        (garbled && !self.is_tls()).then(|| {
            format!(
                "{addr} did not answer in plain HTTP/2: it speaks TLS, most likely. Give the CA \
                 that signed the masters' certificates with --tls-ca FILE or MUSTER_TLS_CA"
            )
        })
    }

    /// The endpoint of the master at `addr` (`HOST:PORT`).
    ///
    /// # Errors
    ///
    /// `addr` is not `HOST:PORT`.
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, tonic::transport::Error> {
        match &self.0 {
            None => Endpoint::from_shared(format!("http://{addr}")),
            Some(tls) => Endpoint::from_shared(format!("https://{addr}"))?.tls_config(tls.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TlsFiles;

    #[test]
    fn a_client_whose_ca_file_is_missing_is_told_it_cannot_be_read() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let files = TlsFiles {
            ca: Some(ca.clone()),
            ..TlsFiles::default()
        };
        let error = files.dialer().unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "cannot read {}: No such file or directory (os error 2)",
                ca.display()
            )
        );
    }
}
