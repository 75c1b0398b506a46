//! The tokens of the Spark REST gateway (`muster rest-token`): a JWS signed with HS256, the
//! scheme Spark 4's own `JWSFilter` checks (`Authorization: Bearer <header>.<payload>.<mac>`),
//! under a key derived from a client credential, so that the credential itself never travels
//! over the gateway's plain HTTP.
//!
//! The key is HMAC-SHA256 of `KEY_LABEL` under the credential's text. A cluster-level
//! client credential (the cluster secret's, or a master's second client secret's) signs a
//! token whose payload names nobody (Spark's tools put anything there, `{}` at least); a named
//! user's credential signs one whose payload says whose it is (`{"sub": NAME, "gen":
//! GENERATION}`), so a master checks it with the key it derives for that user and generation,
//! and revoking the user voids it. An `exp` or `nbf` claim (seconds since the epoch) is
//! honoured, as Spark's check honours it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::auth::{NamedUser, Tokens, credential_user};

/// What the key of a credential is derived with.
const KEY_LABEL: &[u8] = b"muster spark rest";
/// The one JOSE header Muster signs and accepts the algorithm of.
const HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

/// Why a token was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RestTokenError {
    /// Not three base64url parts of JSON objects.
    #[error("the token is not a JWS (HEADER.PAYLOAD.SIGNATURE, base64url JSON): {0}")]
    Malformed(&'static str),
    /// Signed with another algorithm than HS256 (`none` included).
    #[error("the token is signed with `{0}`: only HS256 is accepted")]
    Algorithm(String),
    /// Its `exp` has passed, or its `nbf` has not come.
    #[error("the token is not valid now (its exp or nbf claim)")]
    NotNow,
    /// Not signed with this cluster's key (or that user's current one).
    #[error("the token's signature is wrong: not signed with this cluster's key")]
    WrongSignature,
}

/// The key a token of `credential` (the text of a client credential, as its file holds it)
/// is signed with: what Spark's `JWSFilter` takes, base64url-encoded, as its `secretKey`.
pub fn key(credential: &str) -> Vec<u8> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(credential.as_bytes()).expect("HMAC takes any key");
    mac.update(KEY_LABEL);
    mac.finalize().into_bytes().to_vec()
}

/// [`key`] base64url-encoded, as Spark's settings take it.
pub fn encoded_key(credential: &str) -> String {
    URL_SAFE_NO_PAD.encode(key(credential))
}

/// Who a token lets call.
#[derive(Debug, PartialEq, Eq)]
pub enum RestCaller {
    /// The holder of a cluster-level client credential: which of those [`check`] was given.
    Client(usize),
    /// A named user, whose generation the state machine still checks.
    User(NamedUser),
}

/// A token of `credential` (a client credential's text): a named user's when it is one,
/// else one that names nobody; valid until `expires_at_s` (seconds since the epoch) if
/// given.
pub fn token(credential: &str, expires_at_s: Option<u64>) -> String {
    let mut payload = Map::new();
    if let Some(user) = credential_user(credential) {
        payload.insert("sub".to_owned(), Value::from(user.name));
        payload.insert("gen".to_owned(), Value::from(user.generation));
    }
    if let Some(exp) = expires_at_s {
        payload.insert("exp".to_owned(), Value::from(exp));
    }
    sign(credential, &Value::Object(payload).to_string())
}

/// `payload` signed under [`key`] of `credential`.
fn sign(credential: &str, payload: &str) -> String {
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(HEADER),
        URL_SAFE_NO_PAD.encode(payload)
    );
    let signature = URL_SAFE_NO_PAD.encode(mac(&key(credential), &signed));
    format!("{signed}.{signature}")
}

fn mac(key: &[u8], signed: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(signed.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// A base64url part of a token, decoded.
fn decode(part: &str) -> Result<Vec<u8>, RestTokenError> {
    URL_SAFE_NO_PAD
        // Padding is tolerated: some encoders (Java's default one) write it.
        .decode(part.trim_end_matches('='))
        .map_err(|_| RestTokenError::Malformed("a part is not base64url"))
}

/// A base64url part of a token as a JSON object.
fn object(part: &str) -> Result<Map<String, Value>, RestTokenError> {
    match serde_json::from_slice(&decode(part)?) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(RestTokenError::Malformed("a part is not a JSON object")),
    }
}

/// Who `token` lets call, `now_s` seconds after the epoch: the holder of one of `clients`
/// (cluster-level client credentials' texts), or a named user whose credential `users`
/// derives. The claims name whose key signed it; the signature is checked before any claim
/// is trusted, and then `exp` and `nbf`.
///
/// # Errors
///
/// Why the token does not let anyone call.
pub fn check(
    token: &str,
    now_s: u64,
    clients: &[String],
    users: &Tokens,
) -> Result<RestCaller, RestTokenError> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RestTokenError::Malformed("not three parts"));
    };
    let algorithm = object(header)?.remove("alg");
    if algorithm.as_ref().and_then(Value::as_str) != Some("HS256") {
        return Err(RestTokenError::Algorithm(
            algorithm.map_or_else(|| "no algorithm".to_owned(), |a| a.to_string()),
        ));
    }
    let claims = object(payload)?;
    let given = decode(signature)?;
    let signed = format!("{header}.{payload}");
    let signed_with = |credential: &str| bool::from(given.ct_eq(&mac(&key(credential), &signed)));
    let caller = match (claims.get("sub"), claims.get("gen")) {
        (None, None) => clients
            .iter()
            .position(|client| signed_with(client))
            .map(RestCaller::Client),
        (Some(Value::String(name)), Some(generation)) => {
            let generation = generation
                .as_u64()
                .ok_or(RestTokenError::Malformed("gen is a number"))?;
            users
                .user_credential(name, generation)
                .filter(|credential| signed_with(credential))
                .map(|_| {
                    RestCaller::User(NamedUser {
                        name: name.clone(),
                        generation,
                    })
                })
        }
        _ => {
            return Err(RestTokenError::Malformed(
                "sub (a name) and gen go together",
            ));
        }
    }
    .ok_or(RestTokenError::WrongSignature)?;
    let time = |claim: &str| match claims.get(claim) {
        None => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or(RestTokenError::Malformed(
            "exp and nbf are seconds since the epoch",
        )),
    };
    if time("exp")?.is_some_and(|exp| now_s >= exp) || time("nbf")?.is_some_and(|nbf| now_s < nbf) {
        return Err(RestTokenError::NotNow);
    }
    Ok(caller)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Role, Secret};

    fn secret() -> Secret {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        Secret::create(&path).unwrap();
        Secret::read(&path).unwrap()
    }

    /// The text of `secret`'s client credential.
    fn client(secret: &Secret) -> String {
        secret.credential(Role::Client).to_text().unwrap()
    }

    #[test]
    fn a_clients_token_names_which_client_and_a_users_names_them() {
        let (ours, second) = (secret(), secret());
        let clients = [client(&ours), client(&second)];
        let tokens = ours.tokens();
        assert_eq!(
            check(&token(&clients[1], None), 0, &clients, &tokens),
            Ok(RestCaller::Client(1))
        );
        let alice = tokens.user_credential("alice", 3).unwrap();
        let expected = NamedUser {
            name: "alice".to_owned(),
            generation: 3,
        };
        assert_eq!(
            check(&token(&alice, None), 0, &clients, &tokens),
            Ok(RestCaller::User(expected))
        );
    }

    #[test]
    fn another_clusters_token_a_forged_user_and_other_algorithms_are_refused() {
        let ours = secret();
        let clients = [client(&ours)];
        let tokens = ours.tokens();
        let foreign = token(&client(&secret()), None);
        assert_eq!(
            check(&foreign, 0, &clients, &tokens),
            Err(RestTokenError::WrongSignature)
        );
        // The cluster's key does not sign for a user: a user's token is checked with theirs.
        let forged = sign(&clients[0], r#"{"sub":"alice","gen":1}"#);
        assert_eq!(
            check(&forged, 0, &clients, &tokens),
            Err(RestTokenError::WrongSignature)
        );
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode("{}")
        );
        assert_eq!(
            check(&none, 0, &clients, &tokens),
            Err(RestTokenError::Algorithm("\"none\"".to_owned()))
        );
        assert!(matches!(
            check("not a token", 0, &clients, &tokens),
            Err(RestTokenError::Malformed(_))
        ));
    }

    #[test]
    fn a_token_signed_as_spark_documents_it_is_accepted_until_it_expires() {
        let ours = secret();
        let clients = [client(&ours)];
        let tokens = ours.tokens();
        // Signed by hand with the key `muster rest-token --key` prints, its payload
        // ({"exp":100}) padded as Java's encoder pads it.
        let key = URL_SAFE_NO_PAD.decode(encoded_key(&clients[0])).unwrap();
        let signed = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjEwMH0=";
        let by_hand = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac(&key, signed)));
        assert_eq!(
            check(&by_hand, 99, &clients, &tokens),
            Ok(RestCaller::Client(0))
        );
        assert_eq!(
            check(&by_hand, 100, &clients, &tokens),
            Err(RestTokenError::NotNow)
        );
        let ours = token(&clients[0], Some(100));
        assert_eq!(
            check(&ours, 99, &clients, &tokens),
            Ok(RestCaller::Client(0))
        );
        assert_eq!(
            check(&ours, 100, &clients, &tokens),
            Err(RestTokenError::NotNow)
        );
    }
}
