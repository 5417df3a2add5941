//! Typed errors of the Nacos backend.

use thiserror::Error;

/// Why a Nacos call failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NacosError {
    /// The server could not be reached or the connection broke.
    #[error("nacos server {server} unreachable")]
    Connect {
        /// `host:port` of the gRPC endpoint.
        server: String,
        /// The cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// A gRPC call failed (status from the server or the transport).
    #[error("nacos call {call} failed: {code:?}")]
    Call {
        /// The message type sent.
        call: &'static str,
        /// The gRPC code.
        code: tonic::Code,
        /// The status.
        #[source]
        source: tonic::Status,
    },
    /// The server answered with a failure code.
    #[error("nacos refused {call}: code {code}, {message}")]
    Refused {
        /// The message type sent.
        call: &'static str,
        /// The error code.
        code: i32,
        /// The server's text (bounded).
        message: String,
    },
    /// A call or a whole operation ran out of time.
    #[error("nacos call {call} timed out")]
    Timeout {
        /// The message type sent.
        call: &'static str,
    },
    /// A message body was not the JSON it should be.
    #[error("nacos message {kind:?} could not be decoded")]
    Decode {
        /// Its type (at most 64 chars).
        kind: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// There is no connection to a server right now.
    #[error("not connected to any nacos server")]
    NotConnected,
    /// The registry was dropped.
    #[error("the nacos client is closed")]
    Closed,
}

/// Why one instance record from Nacos was skipped (counted in
/// `invalid_records`; everything else keeps working).
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidInstance {
    /// Not the JSON of an instance.
    #[error("not an instance record: {0}")]
    Shape(String),
    /// Its port is not 1..=65535.
    #[error("port {0} out of range")]
    Port(i64),
    /// Its weight is negative or not a number.
    #[error("weight is not a finite non-negative number")]
    Weight,
    /// Its IP is empty.
    #[error("empty ip")]
    Ip,
    /// Its Dubbo metadata (endpoints, MetadataService params, storage type)
    /// does not parse.
    #[error("invalid Dubbo metadata")]
    Dubbo(#[from] steadfast_core::DubboRecordError),
}
