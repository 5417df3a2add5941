//! MetadataServiceV2's messages, written by hand from Dubbo's
//! `metadata_service_v2.proto` (package `org.apache.dubbo.metadata`; no
//! protoc, no build script), and the Triple names a call carries.

use std::collections::HashMap;

/// The unary method's HTTP/2 path.
pub const GET_METADATA_INFO_PATH: &str =
    "/org.apache.dubbo.metadata.MetadataServiceV2/GetMetadataInfo";
/// Triple's service group header: the provider app.
pub const GROUP_HEADER: &str = "tri-service-group";
/// Triple's service version header: `2.0.0` for MetadataServiceV2.
pub const VERSION_HEADER: &str = "tri-service-version";
/// The version MetadataServiceV2 is exported under.
pub const SERVICE_VERSION: &str = "2.0.0";

/// `MetadataRequest { string revision = 1; }` (named `RevisionV2 { value }`
/// in an older Java copy: the bytes are the same).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct MetadataRequest {
    /// The revision asked for.
    #[prost(string, tag = "1")]
    pub revision: String,
}

/// `MetadataInfoV2`: what a provider exports at one revision.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetadataInfoV2 {
    /// The provider application.
    #[prost(string, tag = "1")]
    pub app: String,
    /// The revision.
    #[prost(string, tag = "2")]
    pub version: String,
    /// The services, keyed by match key.
    #[prost(map = "string, message", tag = "3")]
    pub services: HashMap<String, ServiceInfoV2>,
}

/// `ServiceInfoV2`: one exported service.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServiceInfoV2 {
    /// The interface.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its group (empty: none).
    #[prost(string, tag = "2")]
    pub group: String,
    /// Its version (empty: none).
    #[prost(string, tag = "3")]
    pub version: String,
    /// Its protocol.
    #[prost(string, tag = "4")]
    pub protocol: String,
    /// Its port (0 or less: the consumer derives it, see `convert`).
    #[prost(int32, tag = "5")]
    pub port: i32,
    /// Its path.
    #[prost(string, tag = "6")]
    pub path: String,
    /// Its params (`methods` included).
    #[prost(map = "string, string", tag = "7")]
    pub params: HashMap<String, String>,
}
