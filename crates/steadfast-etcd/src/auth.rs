//! Username / password authentication through the JSON gateway
//! (`POST /v3/auth/authenticate` gives a token; the token goes in the
//! `Authorization` header of every later call, watches and keepalives
//! included).
//!
//! The decisions are sans-IO and live here: [`TokenState`] says whether a
//! caller must authenticate (no token yet, or the token it used was
//! refused and nobody replaced it since) or can reuse a token another caller
//! fetched meanwhile, so a burst of calls refused at once authenticates
//! once; [`is_auth_refusal`] says whether an answer of etcd means "your
//! token is gone" (expired, revoked, lost by a restart, or missing).
//!
//! Measured on etcd 3.4.23 with `--auth-token=simple`:
//!
//! | call | answer |
//! |---|---|
//! | unary, no token | HTTP 400, gRPC 3, `etcdserver: user name is empty` |
//! | unary, expired / revoked / unknown token | HTTP 401, gRPC 16, `etcdserver: invalid auth token` |
//! | authenticate, wrong password | HTTP 400, gRPC 3, `etcdserver: authentication failed, invalid user ID or password` |
//! | watch, bad token | HTTP 200, first message `created` + `canceled`, `cancel_reason: "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"` |
//! | watch already open when its token expires | keeps delivering (checked at creation only) |
//! | lease keepalive, bad token | served (etcd 3.4 does not check it) |
//! | authenticate, auth off | HTTP 412, gRPC 9, `etcdserver: authentication is not enabled`: calls go without a token |
//!
//! A simple token lives `--auth-token-ttl` (300 s) after its last use and
//! is lost when etcd restarts; changing a user's password revokes its
//! tokens.

use serde::{Deserialize, Serialize};
use steadfast_core::Secret;

use crate::error::grpc;

/// etcd's message when a call carries no token.
pub const NO_USER: &str = "user name is empty";
/// etcd's message when the token is expired, revoked or unknown.
pub const INVALID_TOKEN: &str = "invalid auth token";
/// etcd's message when `authenticate` is called while auth is off.
pub const AUTH_NOT_ENABLED: &str = "authentication is not enabled";
/// etcd's message when the auth store changed between the token check and
/// the apply (the call may be re-sent with a fresh token).
pub const OLD_AUTH_REVISION: &str = "revision of auth store is old";

/// Credentials of an etcd user. The password is a [`Secret`]: neither
/// `Debug` nor `Serialize` shows it (a serialized config writes
/// `"<redacted>"`, so dumping a config never leaks it; read it back from
/// its source instead).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdAuth {
    /// The etcd user name.
    pub username: String,
    /// Its password (empty when not given).
    #[serde(default)]
    pub password: Secret,
}

impl EtcdAuth {
    /// Credentials for `username`.
    pub fn new(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }
}

/// Whether an error answer (gRPC `code`, `message`) says the call's token
/// is missing, expired or revoked, so a fresh token may make it pass:
/// gRPC 16 (Unauthenticated), or the texts etcd uses with gRPC 3 for a
/// missing user and a stale auth store.
pub fn is_auth_refusal(code: i64, message: &str) -> bool {
    code == grpc::UNAUTHENTICATED
        || (code == grpc::INVALID_ARGUMENT
            && (message.contains(NO_USER) || message.contains(OLD_AUTH_REVISION)))
}

/// Whether an `authenticate` answer says auth is off on that etcd: the
/// client then sends no token (and authenticates once etcd starts asking).
pub fn is_auth_disabled(code: i64, message: &str) -> bool {
    code == grpc::FAILED_PRECONDITION && message.contains(AUTH_NOT_ENABLED)
}

/// Whether a watch's `cancel_reason` says it was refused for its token
/// (the gateway reports the gRPC status as text there).
pub fn is_auth_cancel(reason: &str) -> bool {
    reason.contains("Unauthenticated")
        || reason.contains(INVALID_TOKEN)
        || reason.contains(NO_USER)
        || reason.contains(OLD_AUTH_REVISION)
}

/// The token a client holds, numbered so a refused caller can tell whether
/// someone already replaced the token it used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenState {
    token: Option<Secret>,
    generation: u64,
}

/// What a caller does about the token, from [`TokenState::decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenDecision {
    /// Use this token (of this generation).
    Use(Secret, u64),
    /// Authenticate, then [`TokenState::install`] the new token.
    Authenticate,
}

impl TokenState {
    /// The token to use, given the generation of the token the caller was
    /// refused with (`None`: the caller was not refused). A refused
    /// generation that is still current means authenticate; a newer token
    /// is used as is.
    pub fn decide(&self, refused: Option<u64>) -> TokenDecision {
        match &self.token {
            Some(t) if refused != Some(self.generation) => {
                TokenDecision::Use(t.clone(), self.generation)
            }
            _ => TokenDecision::Authenticate,
        }
    }

    /// Installs a fresh token; returns its generation.
    pub fn install(&mut self, token: Secret) -> u64 {
        self.generation = self.generation.wrapping_add(1);
        self.token = Some(token);
        self.generation
    }

    /// How many tokens were installed so far.
    #[cfg(test)]
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// The body of `/v3/auth/authenticate`'s answer.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct AuthenticateResponse {
    /// The token (absent on a refusal).
    #[serde(default)]
    pub token: Secret,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_read_from_codes_and_etcds_texts() {
        assert!(is_auth_refusal(16, "etcdserver: invalid auth token"));
        assert!(is_auth_refusal(3, "etcdserver: user name is empty"));
        assert!(is_auth_refusal(
            3,
            "etcdserver: revision of auth store is old"
        ));
        // A wrong password is not a token problem: re-authenticating
        // would not help.
        assert!(!is_auth_refusal(
            3,
            "etcdserver: authentication failed, invalid user ID or password"
        ));
        assert!(!is_auth_refusal(3, "illegal base64 data at input byte 0"));
        assert!(!is_auth_refusal(7, "etcdserver: permission denied"));
        assert!(is_auth_cancel(
            "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"
        ));
        assert!(is_auth_cancel(
            "rpc error: code = InvalidArgument desc = etcdserver: user name is empty"
        ));
        assert!(!is_auth_cancel(
            "mvcc: required revision has been compacted"
        ));
        assert!(!is_auth_cancel(""));
        assert!(is_auth_disabled(
            9,
            "etcdserver: authentication is not enabled"
        ));
        assert!(!is_auth_disabled(
            3,
            "etcdserver: authentication is not enabled"
        ));
    }

    #[test]
    fn a_burst_of_refusals_authenticates_once() {
        let mut s = TokenState::default();
        assert_eq!(s.decide(None), TokenDecision::Authenticate);
        let g1 = s.install("t1".into());
        assert_eq!(s.decide(None), TokenDecision::Use("t1".into(), g1));
        // Two callers were refused with t1: the first authenticates...
        assert_eq!(s.decide(Some(g1)), TokenDecision::Authenticate);
        let g2 = s.install("t2".into());
        // ...the second finds t2 and reuses it.
        assert_eq!(s.decide(Some(g1)), TokenDecision::Use("t2".into(), g2));
        assert_eq!(s.decide(Some(g2)), TokenDecision::Authenticate);
        assert_eq!(s.generation(), 2);
    }

    #[test]
    fn neither_debug_nor_serialize_shows_the_password_or_the_token() {
        let a = EtcdAuth::new("svc", "s3cret");
        let shown = format!("{a:?} {}", serde_json::to_string(&a).unwrap());
        assert!(
            shown.contains("svc") && !shown.contains("s3cret"),
            "{shown}"
        );

        let mut s = TokenState::default();
        let g = s.install("ZNZXtokenvalue.7".into());
        let r: AuthenticateResponse =
            serde_json::from_str(r#"{"token":"ZNZXtokenvalue.8"}"#).unwrap();
        let shown = format!("{s:?} {:?} {r:?}", s.decide(None));
        assert!(!shown.contains("ZNZXtokenvalue"), "{shown}");
        assert_eq!(
            s.decide(None),
            TokenDecision::Use("ZNZXtokenvalue.7".into(), g)
        );
        assert_eq!(r.token.expose(), "ZNZXtokenvalue.8");
    }
}
