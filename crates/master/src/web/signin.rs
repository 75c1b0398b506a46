//! Signing in to what the status pages guard: the output of processes, and the kill
//! buttons. A person signs in once with a token of `muster rest-token`, posted in a form and
//! so never in a URL or the browser's history; the master keeps the token and gives the
//! browser only a random session id, in a cookie scoped to the pages, `HttpOnly`,
//! `SameSite=Strict` and gone after [`SESSION_TTL`]. Every request checks the kept token
//! again, so a revoked user or an expired token stops at once. A form that changes something
//! carries the session's anti-forgery value, which a page of another site cannot read; on an
//! open cluster (no secret: nothing to sign in with, and no cookie) the value is this master's
//! own. Sessions live in this master's memory: another master, or this one restarted, asks
//! again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use muster_proto::auth::random_hex;

/// How long a sign-in lasts.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(3600);

/// The most sessions kept at once; past it the one closest to its end goes.
const MAX_SESSIONS: usize = 10_000;

/// The most sessions of one token; past it its own oldest goes, so that no one holder of a
/// token pushes everyone else's sessions out.
const MAX_SESSIONS_PER_TOKEN: usize = 16;

/// The cookie that names a session over plain HTTP.
const SESSION_COOKIE: &str = "muster_session";
/// The cookie that names a session over HTTPS: a `__Host-` cookie, which only this host may
/// set, over HTTPS, for every path.
const SECURE_SESSION_COOKIE: &str = "__Host-muster_session";

/// The sessions of this master's pages.
pub(crate) struct SignIns {
    sessions: Mutex<HashMap<String, SignedIn>>,
    /// The anti-forgery value of an open cluster's forms.
    open_form_key: String,
}

/// One browser's sign-in.
struct SignedIn {
    /// The token it signed in with.
    token: String,
    /// What its forms carry.
    form_key: String,
    until: Instant,
}

/// Who a request comes from, as its session cookie names them.
pub(crate) struct Session {
    /// The token it signed in with.
    pub(crate) token: String,
    /// What the forms of its pages carry.
    pub(crate) form_key: String,
}

impl SignIns {
    /// No one signed in yet.
    ///
    /// # Errors
    ///
    /// The system's randomness cannot be read.
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Self {
            sessions: Mutex::default(),
            open_form_key: random_hex(16)?,
        })
    }

    /// Signs a browser in with `token` (checked already) at `now`: the `Set-Cookie` value
    /// that names its session (`Secure` over HTTPS).
    ///
    /// # Errors
    ///
    /// The system's randomness cannot be read.
    pub(crate) fn sign_in(
        &self,
        token: &str,
        now: Instant,
        https: bool,
    ) -> std::io::Result<String> {
        let id = random_hex(32)?;
        let form_key = random_hex(16)?;
        let mut sessions = self.sessions.lock().expect("sessions lock");
        sessions.retain(|_, session| session.until > now);
        let oldest = |sessions: &HashMap<String, SignedIn>, of_token: bool| {
            sessions
                .iter()
                .filter(|(_, session)| !of_token || session.token == token)
                .min_by_key(|(_, session)| session.until)
                .map(|(id, _)| id.clone())
        };
        let of_token = sessions.values().filter(|s| s.token == token).count();
        if of_token >= MAX_SESSIONS_PER_TOKEN
            && let Some(oldest) = oldest(&sessions, true)
        {
            sessions.remove(&oldest);
        }
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = oldest(&sessions, false)
        {
            sessions.remove(&oldest);
        }
        sessions.insert(
            id.clone(),
            SignedIn {
                token: token.to_owned(),
                form_key,
                until: now + SESSION_TTL,
            },
        );
        let (name, secure) = if https {
            (SECURE_SESSION_COOKIE, "; Secure")
        } else {
            (SESSION_COOKIE, "")
        };
        Ok(format!(
            "{name}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
            SESSION_TTL.as_secs()
        ))
    }

    /// The session the request with `headers` names (over HTTPS with `https`), if it is
    /// current at `now`.
    pub(crate) fn session(
        &self,
        headers: &HeaderMap,
        https: bool,
        now: Instant,
    ) -> Option<Session> {
        let name = if https {
            SECURE_SESSION_COOKIE
        } else {
            SESSION_COOKIE
        };
        let id = cookie(headers, name)?;
        let sessions = self.sessions.lock().expect("sessions lock");
        let signed_in = sessions.get(id).filter(|session| session.until > now)?;
        Some(Session {
            token: signed_in.token.clone(),
            form_key: signed_in.form_key.clone(),
        })
    }

    /// The anti-forgery value of an open cluster's forms.
    pub(crate) fn open_form_key(&self) -> &str {
        &self.open_form_key
    }
}

/// The value of cookie `name`.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

/// Where a form may send the browser back to: a path of these pages, never another site
/// (nor one a browser would read as another site once it drops blanks and controls).
pub(crate) fn back_to(then: &str) -> &str {
    let local = then.starts_with('/')
        && !then.starts_with("//")
        && !then.contains('\\')
        && then.bytes().all(|b| b.is_ascii_graphic());
    if local { then } else { "/" }
}

/// Whether a request that changes something comes from these pages, as the browser says:
/// its `Sec-Fetch-Site`, or else its `Origin` against its `Host`. A request that says
/// neither (a script, an older browser's same-origin form) is taken.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = header("sec-fetch-site") {
        return site == "same-origin";
    }
    match (header("origin"), header("host")) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority == host),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with_cookie(set_cookie: &str) -> HeaderMap {
        let pair = set_cookie.split(';').next().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(pair).unwrap());
        headers
    }

    #[test]
    fn a_session_names_its_token_until_it_ends_and_the_cookie_holds_no_token() {
        let sign_ins = SignIns::new().unwrap();
        let start = Instant::now();
        let set = sign_ins.sign_in("the-token", start, true).unwrap();
        assert!(!set.contains("the-token"), "{set}");
        assert!(
            set.starts_with("__Host-muster_session=")
                && set.ends_with("; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict; Secure"),
            "{set}"
        );
        let headers = with_cookie(&set);
        let session = sign_ins.session(&headers, true, start).unwrap();
        assert_eq!(session.token, "the-token");
        assert_ne!(session.form_key, sign_ins.open_form_key());
        assert!(
            sign_ins
                .session(&headers, true, start + SESSION_TTL)
                .is_none()
        );
        assert!(sign_ins.session(&headers, false, start).is_none());
        let stranger = with_cookie("__Host-muster_session=0123");
        assert!(sign_ins.session(&stranger, true, start).is_none());
    }

    #[test]
    fn one_token_keeps_at_most_its_share_of_sessions() {
        let sign_ins = SignIns::new().unwrap();
        let start = Instant::now();
        let first = with_cookie(&sign_ins.sign_in("alice", start, false).unwrap());
        let bob = with_cookie(&sign_ins.sign_in("bob", start, false).unwrap());
        for n in 1..=MAX_SESSIONS_PER_TOKEN as u64 {
            let at = start + Duration::from_secs(n);
            sign_ins.sign_in("alice", at, false).unwrap();
        }
        let later = start + Duration::from_secs(100);
        assert!(sign_ins.session(&first, false, later).is_none());
        assert!(sign_ins.session(&bob, false, later).is_some());
    }

    #[test]
    fn a_change_is_taken_only_from_these_pages() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            headers
        };
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(same_origin(&headers(&[
            ("origin", "https://m1:8080"),
            ("host", "m1:8080")
        ])));
        assert!(!same_origin(&headers(&[
            ("origin", "https://evil.example"),
            ("host", "m1:8080")
        ])));
        assert!(same_origin(&headers(&[("host", "m1:8080")])));
    }

    #[test]
    fn a_form_sends_the_browser_back_only_to_these_pages() {
        assert_eq!(
            back_to("/logs/driver-1?stream=stderr"),
            "/logs/driver-1?stream=stderr"
        );
        assert_eq!(back_to("//evil.example/"), "/");
        assert_eq!(back_to("https://evil.example/"), "/");
        assert_eq!(back_to("/\\evil.example"), "/");
        assert_eq!(back_to("/\t/evil.example"), "/");
    }
}
