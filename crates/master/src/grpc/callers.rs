//! Whom an HTTP call acts for, from the token it carries ([`muster_proto::rest_token`]): the
//! cluster itself, for a token of a client secret, or a named user, whose calls on the
//! masters carry their credential and so meet their rights. The Spark REST gateway and the
//! status endpoint's output pages both take callers so.

use std::time::{SystemTime, UNIX_EPOCH};

use muster_proto::auth::{Credential, Tokens};
use muster_proto::rest_token::{self, RestCaller, RestTokenError};

/// What tells callers apart.
#[derive(Clone)]
pub(crate) struct Callers {
    /// The cluster-level client credentials (the cluster secret's, then the second client
    /// secret's, if any), whose tokens name nobody.
    clients: Vec<Credential>,
    /// What derives named users' credentials.
    tokens: Tokens,
}

/// Whom a call acts for.
pub(crate) struct Caller {
    /// What its calls on the masters carry.
    pub(crate) credential: Credential,
    /// The named user, if it is one.
    pub(crate) user: Option<String>,
}

/// Why a call may not be made, as Spark's `JWSFilter` words it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unauthorized {
    /// No token.
    #[error(
        "Authorization header is missing: give a token of `muster rest-token` \
         (Authorization: Bearer TOKEN, or the master URL spark://HOST:PORT/TOKEN)"
    )]
    Missing,
    /// A token that lets nobody call.
    #[error("Failed to verify the token: {0}")]
    Invalid(RestTokenError),
}

impl Callers {
    /// Callers told apart by the client credentials `clients` (the cluster secret's first)
    /// and `tokens`.
    pub(crate) fn new(clients: Vec<Credential>, tokens: Tokens) -> Self {
        Self { clients, tokens }
    }

    /// Whether the cluster has no secret: every call acts for the cluster, with no token.
    pub(crate) fn is_open(&self) -> bool {
        self.tokens.is_open()
    }

    /// Whom a call with `token` acts for: the cluster itself when there is no secret.
    pub(crate) fn caller(&self, token: Option<&str>) -> Result<Caller, Unauthorized> {
        let client = |index: usize| Caller {
            credential: self.clients[index].clone(),
            user: None,
        };
        if self.tokens.is_open() {
            return Ok(client(0));
        }
        let Some(token) = token else {
            return Err(Unauthorized::Missing);
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let clients: Vec<String> = self
            .clients
            .iter()
            .filter_map(Credential::to_text)
            .collect();
        match rest_token::check(token, now, &clients, &self.tokens) {
            Ok(RestCaller::Client(index)) => Ok(client(index)),
            Ok(RestCaller::User(user)) => {
                let text = self
                    .tokens
                    .user_credential(&user.name, user.generation)
                    .expect("a secret derives users' credentials");
                Ok(Caller {
                    credential: Credential::from_text(&text).expect("a credential is ASCII"),
                    user: Some(user.name),
                })
            }
            Err(error) => Err(Unauthorized::Invalid(error)),
        }
    }
}
