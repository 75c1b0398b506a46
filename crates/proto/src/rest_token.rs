//! The tokens of the Spark REST gateway (`muster rest-token`): a JWS signed with HS256, the
//! scheme Spark 4's own `JWSFilter` checks (`Authorization: Bearer <header>.<payload>.<mac>`),
//! under a key derived from a client credential, so that the credential itself never travels
//! over the gateway's plain HTTP.
//!
//! The key is HMAC-SHA256 of [`KEY_LABEL`] under the credential's text. The cluster's own
//! client credential signs a token whose payload names nobody (Spark's tools put anything
//! there, `{}` at least); a named user's credential signs one whose payload says whose it is
//! (`{"sub": NAME, "gen": GENERATION}`), so a master checks it with the key it derives for
//! that user and generation, and revoking the user voids it. An `exp` or `nbf` claim (seconds
//! since the epoch) is honoured, as Spark's check honours it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::auth::{Credential, NamedUser, Role, Tokens};

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

/// A token of `credential`: a named user's when it is one (`Bearer user:NAME:GEN:MAC`), else
/// one that names nobody. `None` without a credential.
pub fn token(credential: &Credential) -> Option<String> {
    let text = credential.to_text()?;
    let mut payload = Map::new();
    if let Some(user) = credential_user(&text) {
        payload.insert("sub".to_owned(), Value::from(user.name));
        payload.insert("gen".to_owned(), Value::from(user.generation));
    }
    Some(sign(&text, &Value::Object(payload).to_string()))
}

/// The user a named user's credential text names, without checking its MAC.
fn credential_user(text: &str) -> Option<NamedUser> {
    let (named, _) = text.strip_prefix("Bearer user:")?.rsplit_once(':')?;
    let (name, generation) = named.split_once(':')?;
    Some(NamedUser {
        name: name.to_owned(),
        generation: generation.parse().ok()?,
    })
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

/// A base64url part of a token as a JSON object.
fn object(part: &str) -> Result<Map<String, Value>, RestTokenError> {
    let bytes = URL_SAFE_NO_PAD
        // Padding is tolerated: some encoders (Java's default one) write it.
        .decode(part.trim_end_matches('='))
        .map_err(|_| RestTokenError::Malformed("a part is not base64url"))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(RestTokenError::Malformed("a part is not a JSON object")),
    }
}

impl Tokens {
    /// Who `token` lets call, `now_s` seconds after the epoch: `None` for the cluster's own
    /// client credential, or the named user it was signed for (whose generation the state
    /// machine still checks). Without a secret every token is the cluster's.
    ///
    /// # Errors
    ///
    /// Why the token does not let anyone call.
    pub fn check_rest_token(
        &self,
        token: &str,
        now_s: u64,
    ) -> Result<Option<NamedUser>, RestTokenError> {
        let Some(secret) = &self.0 else {
            return Ok(None);
        };
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
        let time = |claim: &str| match claims.get(claim) {
            None => Ok(None),
            Some(value) => value.as_u64().map(Some).ok_or(RestTokenError::Malformed(
                "exp and nbf are seconds since the epoch",
            )),
        };
        if time("exp")?.is_some_and(|exp| now_s >= exp)
            || time("nbf")?.is_some_and(|nbf| now_s < nbf)
        {
            return Err(RestTokenError::NotNow);
        }
        let user = match (claims.get("sub"), claims.get("gen")) {
            (None, None) => None,
            (Some(Value::String(name)), Some(generation)) => Some(NamedUser {
                name: name.clone(),
                generation: generation
                    .as_u64()
                    .ok_or(RestTokenError::Malformed("gen is a number"))?,
            }),
            _ => {
                return Err(RestTokenError::Malformed(
                    "sub (a name) and gen go together",
                ));
            }
        };
        let credential = match &user {
            Some(user) => secret.user_credential(&user.name, user.generation),
            None => secret
                .credential(Role::Client)
                .to_text()
                .expect("a secret's credential"),
        };
        let given = URL_SAFE_NO_PAD
            .decode(signature.trim_end_matches('='))
            .map_err(|_| RestTokenError::Malformed("the signature is not base64url"))?;
        let expected = mac(&key(&credential), &format!("{header}.{payload}"));
        if bool::from(given.ct_eq(&expected)) {
            Ok(user)
        } else {
            Err(RestTokenError::WrongSignature)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Secret;

    fn secret() -> Secret {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        Secret::create(&path).unwrap();
        Secret::read(&path).unwrap()
    }

    #[test]
    fn the_clusters_token_names_nobody_and_a_users_names_them() {
        let secret = secret();
        let tokens = secret.tokens();
        let cluster = token(&secret.credential(Role::Client)).unwrap();
        assert_eq!(tokens.check_rest_token(&cluster, 0), Ok(None));
        let alice = Credential::from_text(&tokens.user_credential("alice", 3).unwrap()).unwrap();
        let expected = NamedUser {
            name: "alice".to_owned(),
            generation: 3,
        };
        assert_eq!(
            tokens.check_rest_token(&token(&alice).unwrap(), 0),
            Ok(Some(expected))
        );
    }

    #[test]
    fn another_clusters_token_a_forged_user_and_other_algorithms_are_refused() {
        let ours = secret().tokens();
        let theirs = secret();
        let foreign = token(&theirs.credential(Role::Client)).unwrap();
        assert_eq!(
            ours.check_rest_token(&foreign, 0),
            Err(RestTokenError::WrongSignature)
        );
        // The cluster's key does not sign for a user: a user's token is checked with theirs.
        let Tokens(Some(secret)) = &ours else {
            unreachable!()
        };
        let cluster = secret.credential(Role::Client).to_text().unwrap();
        let forged = sign(&cluster, r#"{"sub":"alice","gen":1}"#);
        assert_eq!(
            ours.check_rest_token(&forged, 0),
            Err(RestTokenError::WrongSignature)
        );
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode("{}")
        );
        assert_eq!(
            ours.check_rest_token(&none, 0),
            Err(RestTokenError::Algorithm("\"none\"".to_owned()))
        );
        assert!(matches!(
            ours.check_rest_token("not a token", 0),
            Err(RestTokenError::Malformed(_))
        ));
    }

    #[test]
    fn a_token_signed_as_spark_documents_it_is_accepted_until_it_expires() {
        let ours = secret().tokens();
        let Tokens(Some(secret)) = &ours else {
            unreachable!()
        };
        let cluster = secret.credential(Role::Client).to_text().unwrap();
        // Signed by hand with the key `muster rest-token --key` prints, its payload
        // ({"exp":100}) padded as Java's encoder pads it.
        let key = URL_SAFE_NO_PAD.decode(encoded_key(&cluster)).unwrap();
        let signed = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjEwMH0=";
        let token = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac(&key, signed)));
        assert_eq!(ours.check_rest_token(&token, 99), Ok(None));
        assert_eq!(
            ours.check_rest_token(&token, 100),
            Err(RestTokenError::NotNow)
        );
    }
}
