//! Login to a server with auth on: `POST /nacos/v1/auth/login` (form
//! `username`, `password`) at the server's HTTP port answers an access
//! token and its time to live; the token then travels in every call's
//! `accessToken` header. The password is sent only here and never logged.

use std::time::Duration;

use serde::Deserialize;

use crate::config::{http_address, NacosAuth};
use crate::error::NacosError;
use crate::link::MAX_TOKEN_TTL;

/// A token and how long it lives (no `Debug`: the token is a secret).
pub struct Token {
    /// The access token (raw, no `Bearer `).
    pub value: String,
    /// Its time to live.
    pub ttl: Duration,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoginAnswer {
    access_token: String,
    #[serde(default)]
    token_ttl: u64,
}

/// Logs `auth` in at the server whose gRPC address is `grpc`, within
/// `timeout`.
pub async fn login(
    http: &reqwest::Client,
    grpc: &str,
    auth: &NacosAuth,
    timeout: Duration,
) -> Result<Token, NacosError> {
    let refused = |code: i32, message: String| NacosError::Refused {
        call: "login",
        code,
        message,
    };
    let server =
        http_address(grpc).ok_or_else(|| refused(0, format!("no HTTP port for {grpc}")))?;
    let form = [
        ("username", auth.username.as_str()),
        ("password", auth.password.expose()),
    ];
    let work = async {
        let answer = http
            .post(format!("http://{server}/nacos/v1/auth/login"))
            .form(&form)
            .send()
            .await
            .map_err(|e| refused(0, format!("login request failed: {}", e.without_url())))?;
        let status = answer.status();
        if !status.is_success() {
            return Err(refused(i32::from(status.as_u16()), "login refused".into()));
        }
        let body: LoginAnswer = answer
            .json()
            .await
            .map_err(|_| refused(0, "login answer is not a token".into()))?;
        Ok(Token {
            value: body.access_token,
            // A missing or zero TTL: Nacos's default of 5 hours is not
            // assumed; refresh every 10 minutes instead.
            // Bounded: a huge TTL from the server never reaches a clock.
            ttl: Duration::from_secs(if body.token_ttl == 0 {
                600
            } else {
                body.token_ttl
            })
            .min(MAX_TOKEN_TTL),
        })
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| NacosError::Timeout { call: "login" })?
}
