//! The Nacos 2.x gRPC envelope, written by hand from its proto
//! (`nacos_grpc_service.proto`, no package): every request and response is
//! a [`Payload`] whose `metadata.type` names the message and whose body is
//! a `google.protobuf.Any` holding the JSON message in `value`. Two
//! services carry it: `Request/request` (unary) and
//! `BiRequestStream/requestBiStream` (both ways).

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::NacosError;

/// gRPC path of the unary service.
pub const UNARY_PATH: &str = "/Request/request";
/// gRPC path of the bi-directional stream.
pub const BI_STREAM_PATH: &str = "/BiRequestStream/requestBiStream";

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    /// Type URL (Nacos leaves it empty).
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// The JSON message.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `Metadata`: the message type, the client's IP and headers. Its `Debug`
/// names the headers but never shows their values (the access token).
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct Metadata {
    /// Simple class name of the message, e.g. `InstanceRequest`.
    #[prost(string, tag = "3")]
    pub r#type: String,
    /// The client's IP as it reports it.
    #[prost(string, tag = "8")]
    pub client_ip: String,
    /// Headers (the access token of an authenticated client).
    #[prost(map = "string, string", tag = "7")]
    pub headers: HashMap<String, String>,
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.headers.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Metadata")
            .field("type", &self.r#type)
            .field("client_ip", &self.client_ip)
            .field("headers", &names)
            .finish()
    }
}

/// `Payload`: metadata and body.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Payload {
    /// What the body is.
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<Metadata>,
    /// The JSON body.
    #[prost(message, optional, tag = "3")]
    pub body: Option<Any>,
}

impl Payload {
    /// A payload of type `kind` carrying `body` as JSON.
    pub fn new<T: Serialize>(kind: &str, body: &T, client_ip: &str) -> Payload {
        Payload {
            metadata: Some(Metadata {
                r#type: kind.to_string(),
                client_ip: client_ip.to_string(),
                headers: HashMap::new(),
            }),
            // Serializing plain structs of strings, numbers and maps of
            // strings cannot fail.
            body: Some(Any {
                type_url: String::new(),
                value: serde_json::to_vec(body).unwrap_or_default(),
            }),
        }
    }

    /// The message type named in the metadata (empty when none).
    pub fn kind(&self) -> &str {
        self.metadata.as_ref().map_or("", |m| m.r#type.as_str())
    }

    /// The body read as a `T`: a typed error for a body that is missing or
    /// not the JSON of a `T`.
    pub fn body<T: DeserializeOwned>(&self) -> Result<T, NacosError> {
        let bytes = self.body.as_ref().map_or(&[][..], |b| b.value.as_slice());
        serde_json::from_slice(bytes).map_err(|source| NacosError::Decode {
            kind: self.kind().chars().take(64).collect(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_never_shows_a_header_value() {
        let mut p = super::Payload::new("InstanceRequest", &serde_json::json!({}), "");
        if let Some(m) = p.metadata.as_mut() {
            m.headers.insert("accessToken".into(), "tok-s3cret".into());
        }
        let shown = format!("{p:?}");
        assert!(
            shown.contains("accessToken") && !shown.contains("tok-s3cret"),
            "{shown}"
        );
    }
}
