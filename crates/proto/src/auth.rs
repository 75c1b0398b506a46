//! Who may call what: the cluster secret, the role credentials derived from it, and the check
//! a master runs on every call before it reads the request.
//!
//! One secret, a file of at least 32 bytes readable by its owner alone, is shared by the
//! masters, the workers and the people who use the cluster. Each [`Role`] gets its own
//! credential, HMAC-SHA256 of the secret with the role's label, so a credential proves one
//! role and nothing else: a client's cannot register a worker or vote in an election. A call
//! carries its credential in the `authorization` metadata ([`Credential`] is the interceptor
//! that adds it); a master's [`Guard`] compares it in constant time with the credentials the
//! called service accepts and refuses the call with `UNAUTHENTICATED` (none or a wrong one) or
//! `PERMISSION_DENIED` (another role's).
//!
//! A named user's credential (`muster users add`, [`Tokens::user_credential`]) is HMAC of the
//! secret with their name and the generation of their credential: every master checks it
//! without a stored secret, and a [`NamedUser`] rides with the call for the state machine to
//! check that the generation is still the valid one. It serves the client role; a file
//! holding one ([`SecretFile`]) is what that user gives where others give the secret, and the
//! drivers they submit call the masters with it.
//!
//! An application belongs to whoever registered it: the registration answers with a token
//! ([`Tokens::app_token`]), HMAC of the secret with the app's id, and re-attaching to the app needs
//! it. Every master derives the same token, so it survives failovers without being stored.
//!
//! Without a secret ([`Credential::none`], [`Verifier::open`], [`Tokens::open`]) nothing is
//! checked: only for a cluster that listens on loopback, or one started with `--insecure`.

use std::fmt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The metadata key a credential travels in.
pub const AUTHORIZATION: &str = "authorization";

/// The environment variable in which a worker hands its drivers a client credential: its
/// own, or that of the named user who submitted the driver.
pub const CREDENTIAL_VARIABLE: &str = "MUSTER_CREDENTIAL";

/// The environment variable that names the secret file, for those who take it from there.
pub const SECRET_FILE_VARIABLE: &str = "MUSTER_SECRET_FILE";

/// The fewest bytes a secret may have.
pub const MIN_SECRET_BYTES: usize = 32;

/// What a credential lets its holder do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A master replica: Raft between masters.
    Peer,
    /// A worker agent: its stream to the leader.
    Worker,
    /// A person or program using the cluster: status, submissions, kills, queues, apps.
    Client,
    /// An application's executor: its stream to the application's driver, under the
    /// driver's own secret.
    Executor,
}

impl Role {
    const ALL: [Role; 4] = [Role::Peer, Role::Worker, Role::Client, Role::Executor];

    fn label(self) -> &'static str {
        match self {
            Self::Peer => "peer",
            Self::Worker => "worker",
            Self::Client => "client",
            Self::Executor => "executor",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Why a secret file was refused.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file cannot be read.
    #[error("cannot read the secret file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file cannot be created.
    #[error("cannot write the secret file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Others than its owner may read it.
    #[error(
        "the secret file {path} may be read by others (mode {mode:o}): make it readable by its owner only (chmod 600)"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It holds a named user's credential where the cluster's secret is needed.
    #[error(
        "{path} holds a user's credential: masters and workers need the cluster's secret itself"
    )]
    UserCredential {
        /// The file.
        path: PathBuf,
    },
    /// It holds a user's credential that is not printable ASCII.
    #[error("{path} holds a malformed user credential: it must be printable ASCII")]
    MalformedCredential {
        /// The file.
        path: PathBuf,
    },
    /// It holds too little.
    #[error("the secret in {path} has {len} bytes; it needs at least {MIN_SECRET_BYTES}")]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Its length, surrounding white space aside.
        len: usize,
    },
}

/// The cluster secret. Never printed.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// How a named user's credential starts, in the `authorization` header and in their file.
const USER_PREFIX: &str = "Bearer user:";

/// What a secret file holds: the cluster's secret, or a named user's credential.
#[derive(Debug)]
pub enum SecretFile {
    /// The cluster's secret.
    Cluster(Secret),
    /// A named user's client credential.
    User(Credential),
}

impl SecretFile {
    /// Reads the file at `path`: the content, surrounding white space aside, is a user's
    /// credential when it starts with `Bearer user:`, else the cluster's secret.
    ///
    /// # Errors
    ///
    /// The file cannot be read, group or others may read it, a secret holds fewer than
    /// [`MIN_SECRET_BYTES`] bytes, or a credential is not printable ASCII.
    pub fn read(path: &Path) -> Result<Self, SecretError> {
        let bytes = read_private(path)?;
        if bytes.starts_with(USER_PREFIX.as_bytes()) {
            let text = String::from_utf8_lossy(&bytes);
            return Credential::from_text(&text).map(Self::User).map_err(|_| {
                SecretError::MalformedCredential {
                    path: path.to_owned(),
                }
            });
        }
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort {
                path: path.to_owned(),
                len: bytes.len(),
            });
        }
        Ok(Self::Cluster(Secret(bytes)))
    }
}

/// The content of the file at `path`, surrounding white space aside, if only its owner may
/// read it.
///
/// # Errors
///
/// The file cannot be read, or group or others may read it.
pub fn read_private(path: &Path) -> Result<Vec<u8>, SecretError> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let read = |source| SecretError::Read {
        path: path.to_owned(),
        source,
    };
    // The permissions checked are those of the file read: one open, no race.
    let mut file = std::fs::File::open(path).map_err(read)?;
    let mode = file.metadata().map_err(read)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretError::Exposed {
            path: path.to_owned(),
            mode,
        });
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(read)?;
    Ok(bytes.trim_ascii().to_vec())
}

impl Secret {
    /// Reads the secret at `path`: the file's content, surrounding white space aside.
    ///
    /// # Errors
    ///
    /// The file cannot be read, group or others may read it, it holds a user's credential,
    /// or it holds fewer than [`MIN_SECRET_BYTES`] bytes.
    pub fn read(path: &Path) -> Result<Self, SecretError> {
        match SecretFile::read(path)? {
            SecretFile::Cluster(secret) => Ok(secret),
            SecretFile::User(_) => Err(SecretError::UserCredential {
                path: path.to_owned(),
            }),
        }
    }

    /// `user`'s credential at `generation`: `Bearer user:NAME:GENERATION:` and the hex of
    /// HMAC-SHA256(secret, `NAME:GENERATION`).
    fn user_credential(&self, user: &str, generation: u64) -> String {
        let named = format!("{user}:{generation}");
        let mac = self.derive("muster user ", &named);
        format!("{USER_PREFIX}{named}:{mac}")
    }

    /// A new secret that lives in this process only (a driver's, for its executors).
    ///
    /// # Errors
    ///
    /// No randomness is available.
    pub fn random() -> std::io::Result<Self> {
        Ok(Self(random_hex(MIN_SECRET_BYTES)?.into_bytes()))
    }

    /// Writes a new secret to `path`: 32 random bytes as hex, readable by its owner only.
    /// An existing file is left alone and refused.
    ///
    /// # Errors
    ///
    /// The file exists or cannot be written, or no randomness is available.
    pub fn create(path: &Path) -> Result<(), SecretError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let failed = |source| SecretError::Write {
            path: path.to_owned(),
            source,
        };
        let secret = random_hex(MIN_SECRET_BYTES).map_err(failed)?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut file| file.write_all(secret.as_bytes()))
            .map_err(failed)
    }

    /// The credential of `role`: `Bearer` and the hex of HMAC-SHA256(secret, role label).
    pub fn credential(&self, role: Role) -> Credential {
        Credential(Some(self.header(role)))
    }

    /// The check that accepts this secret's credentials.
    pub fn verifier(&self) -> Verifier {
        Verifier(Some(Accepted {
            roles: Role::ALL
                .iter()
                .map(|&role| (role, self.header(role)))
                .collect(),
            secret: self.clone(),
        }))
    }

    /// This secret's check, also accepting the client credential of `clients`: a second
    /// secret an operator hands out for submitting work, which grants nothing else.
    pub fn verifier_with_clients(&self, clients: &Secret) -> Verifier {
        let mut verifier = self.verifier();
        if let Some(accepted) = &mut verifier.0 {
            accepted
                .roles
                .push((Role::Client, clients.header(Role::Client)));
        }
        verifier
    }

    /// What this secret issues: applications' tokens and named users' credentials.
    pub fn tokens(&self) -> Tokens {
        Tokens(Some(self.clone()))
    }

    fn header(&self, role: Role) -> AsciiMetadataValue {
        format!("Bearer {}", self.derive("muster role ", role.label()))
            .parse()
            .expect("hex is ASCII")
    }

    /// HMAC-SHA256 of `label` and `name` under the secret, as hex.
    fn derive(&self, label: &str, name: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(label.as_bytes());
        mac.update(name.as_bytes());
        hex(&mac.finalize().into_bytes())
    }
}

/// What a master derives from the secret for those it answers: the tokens that prove an
/// application is the caller's, and named users' credentials.
#[derive(Clone, Debug)]
pub struct Tokens(Option<Secret>);

impl Tokens {
    /// No tokens: for a cluster without a secret.
    pub fn open() -> Self {
        Self(None)
    }

    /// Whether there is no secret to derive anything from.
    pub fn is_open(&self) -> bool {
        self.0.is_none()
    }

    /// The token of application `app`: empty without a secret.
    pub fn app_token(&self, app: &str) -> String {
        self.0
            .as_ref()
            .map(|secret| secret.derive("muster app ", app))
            .unwrap_or_default()
    }

    /// Whether `token` is application `app`'s, compared in constant time.
    ///
    /// # Errors
    ///
    /// `PERMISSION_DENIED` for a missing or wrong token.
    pub fn check_app(&self, app: &str, token: &str) -> Result<(), Status> {
        if bool::from(self.app_token(app).as_bytes().ct_eq(token.as_bytes())) {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "application `{app}` belongs to the client that registered it: its app token is missing or wrong"
            )))
        }
    }

    /// Named user `user`'s credential at `generation`, as their file holds it and as
    /// `MUSTER_CREDENTIAL` takes it; none without a secret.
    pub fn user_credential(&self, user: &str, generation: u64) -> Option<String> {
        self.0
            .as_ref()
            .map(|secret| secret.user_credential(user, generation))
    }
}

/// `bytes` random bytes from the kernel, as hex: for secrets and ids nobody may guess.
///
/// # Errors
///
/// `/dev/urandom` cannot be read.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut random = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    Ok(hex(&random))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A credential given as text that no header can carry.
#[derive(Debug, thiserror::Error)]
#[error("a credential must be printable ASCII")]
pub struct InvalidCredential;

/// What a caller adds to every call: its role's credential, or nothing without a secret.
#[derive(Clone, Default)]
pub struct Credential(Option<AsciiMetadataValue>);

impl fmt::Debug for Credential {
    /// Never the credential itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Credential(..)"
        } else {
            "Credential(none)"
        })
    }
}

impl Credential {
    /// No credential: for a cluster without a secret.
    pub fn none() -> Self {
        Self(None)
    }

    /// A credential handed over as text (an executor's, in its environment).
    ///
    /// # Errors
    ///
    /// The text cannot travel in a header.
    pub fn from_text(text: &str) -> Result<Self, InvalidCredential> {
        text.parse()
            .map(|header| Self(Some(header)))
            .map_err(|_| InvalidCredential)
    }

    /// The credential as text, to hand over to a process that will call with it.
    pub fn to_text(&self) -> Option<String> {
        self.0
            .as_ref()
            .map(|header| header.to_str().expect("an ASCII header").to_owned())
    }

    /// Adds the credential to `metadata`.
    pub fn attach(&self, metadata: &mut MetadataMap) {
        if let Some(header) = &self.0 {
            metadata.insert(AUTHORIZATION, header.clone());
        }
    }
}

impl Interceptor for Credential {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        self.attach(request.metadata_mut());
        Ok(request)
    }
}

/// What a master accepts: each role's credential and the named users' credentials, or
/// anything without a secret.
#[derive(Clone)]
pub struct Verifier(Option<Accepted>);

#[derive(Clone)]
struct Accepted {
    roles: Vec<(Role, AsciiMetadataValue)>,
    /// What the named users' credentials are derived from.
    secret: Secret,
}

/// A named user's credential, as a call carried it: valid for the name, and for the
/// generation if the state machine says it is still the current one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedUser {
    /// Their name.
    pub name: String,
    /// The generation of their credential.
    pub generation: u64,
}

impl fmt::Debug for Verifier {
    /// Never the credentials themselves.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Verifier(..)"
        } else {
            "Verifier(open)"
        })
    }
}

impl Verifier {
    /// Accepts every call: for a cluster without a secret.
    pub fn open() -> Self {
        Self(None)
    }

    /// The role whose credential `metadata` carries, comparing in constant time, and the
    /// user for a named user's credential (which serves the client role).
    ///
    /// # Errors
    ///
    /// `UNAUTHENTICATED`: no credential, or one of no role and no user.
    pub fn role(
        &self,
        metadata: &MetadataMap,
    ) -> Result<Option<(Role, Option<NamedUser>)>, Status> {
        let Some(accepted) = &self.0 else {
            return Ok(None);
        };
        let Some(given) = metadata.get(AUTHORIZATION) else {
            return Err(Status::unauthenticated(
                "no credential: give the cluster's secret (--secret-file or MUSTER_SECRET_FILE)",
            ));
        };
        let wrong = || Status::unauthenticated("wrong credential: not this cluster's secret");
        if given.as_bytes().starts_with(USER_PREFIX.as_bytes()) {
            let user = given
                .to_str()
                .ok()
                .and_then(|given| named_user(&accepted.secret, given))
                .ok_or_else(wrong)?;
            return Ok(Some((Role::Client, Some(user))));
        }
        // Every credential is compared, so the time taken does not tell which one was close.
        let mut found = None;
        for (role, expected) in &accepted.roles {
            if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
                found = Some(*role);
            }
        }
        found.map(|role| Some((role, None))).ok_or_else(wrong)
    }

    /// The interceptor for a service that `allowed` roles may call.
    pub fn guard(&self, service: &'static str, allowed: &'static [Role]) -> Guard {
        Guard {
            verifier: self.clone(),
            service,
            allowed,
        }
    }
}

/// The user a credential `Bearer user:NAME:GENERATION:MAC` names, if `secret` made the MAC.
fn named_user(secret: &Secret, given: &str) -> Option<NamedUser> {
    let user = credential_user(given)?;
    let expected = secret.user_credential(&user.name, user.generation);
    bool::from(given.as_bytes().ct_eq(expected.as_bytes())).then_some(user)
}

/// The user a named user's credential text (`Bearer user:NAME:GENERATION:MAC`) names,
/// without checking its MAC; `None` for any other credential.
pub fn credential_user(text: &str) -> Option<NamedUser> {
    let (named, _) = text.strip_prefix(USER_PREFIX)?.rsplit_once(':')?;
    let (name, generation) = named.split_once(':')?;
    Some(NamedUser {
        name: name.to_owned(),
        generation: generation.parse().ok()?,
    })
}

/// The check in front of one service: refuses a call before its request is read.
#[derive(Clone, Debug)]
pub struct Guard {
    verifier: Verifier,
    service: &'static str,
    allowed: &'static [Role],
}

impl Guard {
    /// Whether a call with `metadata` may go on; the named user who makes it, if one does.
    ///
    /// # Errors
    ///
    /// `UNAUTHENTICATED` without a valid credential, `PERMISSION_DENIED` for a role this
    /// service does not serve.
    pub fn check(&self, metadata: &MetadataMap) -> Result<Option<NamedUser>, Status> {
        match self.verifier.role(metadata)? {
            Some((role, _)) if !self.allowed.contains(&role) => Err(Status::permission_denied(
                format!("a {role} credential may not call {}", self.service),
            )),
            Some((_, user)) => Ok(user),
            None => Ok(None),
        }
    }
}

impl Interceptor for Guard {
    /// Refuses what [`Guard::check`] refuses; a named user's call carries their
    /// [`NamedUser`] in its extensions.
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        match self.check(request.metadata()) {
            Ok(user) => {
                if let Some(user) = user {
                    request.extensions_mut().insert(user);
                }
                Ok(request)
            }
            Err(status) => {
                tracing::warn!(
                    service = self.service,
                    remote = ?request.remote_addr(),
                    reason = status.message(),
                    "call refused"
                );
                Err(status)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use tonic::Code;

    use super::*;

    fn secret_file(content: &str, mode: u32) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), content).unwrap();
        std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        file
    }

    fn secret(content: &str) -> Secret {
        Secret::read(secret_file(content, 0o600).path()).unwrap()
    }

    fn metadata(credential: &Credential) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        credential.attach(&mut metadata);
        metadata
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_secret_file_must_be_private_and_long_enough() {
        let exposed = secret_file(SECRET, 0o644);
        let error = Secret::read(exposed.path()).unwrap_err();
        assert!(
            matches!(error, SecretError::Exposed { mode: 0o644, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("chmod 600"), "{error}");
        let short = secret_file("too short\n", 0o600);
        assert!(matches!(
            Secret::read(short.path()).unwrap_err(),
            SecretError::TooShort { len: 9, .. }
        ));
        let missing = Secret::read(Path::new("/nonexistent/secret")).unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("cannot read the secret file /nonexistent/secret: "),
            "{missing}"
        );
        let unwritable = Secret::create(Path::new("/nonexistent/secret")).unwrap_err();
        assert!(
            unwritable
                .to_string()
                .starts_with("cannot write the secret file /nonexistent/secret: "),
            "{unwritable}"
        );
        // Surrounding white space, such as a final newline, is not part of the secret.
        let with_newline = secret(&format!("{SECRET}\n"));
        let verifier = secret(SECRET).verifier();
        let given = metadata(&with_newline.credential(Role::Client));
        assert_eq!(verifier.role(&given).unwrap(), Some((Role::Client, None)));
    }

    #[test]
    fn each_role_has_its_own_credential_and_only_its_services_accept_it() {
        let secret = secret(SECRET);
        let verifier = secret.verifier();
        for role in Role::ALL {
            let given = metadata(&secret.credential(role));
            assert_eq!(verifier.role(&given).unwrap(), Some((role, None)));
        }
        let workers = verifier.guard("WorkerLink", &[Role::Worker]);
        assert!(
            workers
                .check(&metadata(&secret.credential(Role::Worker)))
                .is_ok()
        );
        let denied = workers
            .check(&metadata(&secret.credential(Role::Client)))
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert_eq!(
            denied.message(),
            "a client credential may not call WorkerLink"
        );
    }

    #[test]
    fn no_credential_or_another_clusters_is_unauthenticated() {
        let verifier = secret(SECRET).verifier();
        let other = secret("another cluster's secret, 32 bytes or more");
        for given in [
            MetadataMap::new(),
            metadata(&other.credential(Role::Client)),
        ] {
            assert_eq!(
                verifier.role(&given).unwrap_err().code(),
                Code::Unauthenticated
            );
        }
        // Without a secret everything is accepted, and nothing is attached.
        assert!(Tokens::open().check_app("app-1", "").is_ok());
        assert_eq!(Verifier::open().role(&MetadataMap::new()).unwrap(), None);
        assert!(metadata(&Credential::none()).is_empty());
    }

    #[test]
    fn an_app_token_opens_its_own_app_only() {
        let tokens = secret(SECRET).tokens();
        let token = tokens.app_token("app-20231031224509-0000");
        assert_eq!(token.len(), 64);
        assert!(tokens.check_app("app-20231031224509-0000", &token).is_ok());
        let denied = tokens
            .check_app("app-20231031224509-0001", &token)
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert!(tokens.check_app("app-20231031224509-0000", "").is_err());
        // Another master with the same secret derives the same token.
        assert_eq!(
            secret(SECRET).tokens().app_token("app-20231031224509-0000"),
            token
        );
    }

    #[test]
    fn a_client_only_secret_opens_client_services_only() {
        let cluster = secret(SECRET);
        let clients = secret("a second secret, for people who submit work");
        let verifier = cluster.verifier_with_clients(&clients);
        let given = metadata(&clients.credential(Role::Client));
        assert_eq!(verifier.role(&given).unwrap(), Some((Role::Client, None)));
        for role in [Role::Worker, Role::Peer] {
            let given = metadata(&clients.credential(role));
            assert_eq!(
                verifier.role(&given).unwrap_err().code(),
                Code::Unauthenticated
            );
        }
    }

    #[test]
    fn a_named_users_credential_file_serves_clients_and_names_them() {
        let cluster = secret(SECRET);
        let file = secret_file(&format!("{}\n", cluster.user_credential("alice", 3)), 0o600);
        let SecretFile::User(credential) = SecretFile::read(file.path()).unwrap() else {
            panic!("a user's credential");
        };
        let verifier = cluster.verifier();
        let alice = NamedUser {
            name: "alice".to_owned(),
            generation: 3,
        };
        let given = metadata(&credential);
        assert_eq!(
            verifier.role(&given).unwrap(),
            Some((Role::Client, Some(alice.clone())))
        );
        let clients = verifier.guard("Cluster", &[Role::Client]);
        assert_eq!(clients.check(&given).unwrap(), Some(alice));
        let workers = verifier.guard("WorkerLink", &[Role::Worker]);
        assert_eq!(
            workers.check(&given).unwrap_err().code(),
            Code::PermissionDenied
        );
        // Another name, another generation or another cluster's secret: refused.
        let forged = [
            cluster.user_credential("alice", 3).replace("alice", "bob"),
            cluster.user_credential("alice", 3).replace(":3:", ":4:"),
            secret("another cluster's secret, long enough").user_credential("alice", 3),
        ];
        for forged in forged {
            let given = metadata(&Credential::from_text(&forged).unwrap());
            assert_eq!(
                verifier.role(&given).unwrap_err().code(),
                Code::Unauthenticated,
                "{forged}"
            );
        }
        // Where the cluster's secret is needed, a user's credential is a clear error.
        let error = Secret::read(file.path()).unwrap_err();
        assert!(
            error.to_string().contains("holds a user's credential"),
            "{error}"
        );
    }
}
