//! The JSON messages of the Nacos 2.x gRPC protocol that this client sends
//! and answers (field names as Nacos spells them, camelCase). Every
//! response is read leniently: unknown fields are ignored and missing ones
//! take defaults, since rnacos, Nacos 2.x and 3.x each add their own.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// The result code of a successful response.
pub const SUCCESS: i32 = 200;

/// The fields every response carries.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResponseHead {
    /// 200 on success, 500 on failure.
    pub result_code: i32,
    /// The failure's code (0 on success).
    pub error_code: i32,
    /// The failure's text.
    pub message: Option<String>,
    /// The id of the request answered.
    pub request_id: Option<String>,
}

/// `ServerCheckRequest` (unary): the first call on a new connection.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerCheckRequest {
    /// Request headers.
    pub headers: HashMap<String, String>,
    /// Request id.
    pub request_id: String,
}

/// `ServerCheckResponse`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerCheckResponse {
    /// The id the server gave this connection.
    pub connection_id: Option<String>,
}

/// `ConnectionSetupRequest`: the first message on the bi-stream; it binds
/// the stream (and this HTTP/2 connection's unary calls) to the connection.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSetupRequest {
    /// Request headers.
    pub headers: HashMap<String, String>,
    /// Request id.
    pub request_id: String,
    /// The client's name and version.
    pub client_version: String,
    /// The namespace.
    pub tenant: String,
    /// Labels (`module`, `source`).
    pub labels: HashMap<String, String>,
    /// What the client can do (none of the optional abilities).
    pub abilities: serde_json::Value,
}

/// A request of the naming module: namespace, service and group.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamingHead {
    /// Request headers (the access token when logged in).
    pub headers: HashMap<String, String>,
    /// Request id.
    pub request_id: String,
    /// Always `naming`.
    pub module: &'static str,
    /// The namespace id (`public` by default, sent explicitly).
    pub namespace: String,
    /// The service name (the provider application).
    pub service_name: String,
    /// The group.
    pub group_name: String,
}

/// An instance as Nacos holds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NacosInstance {
    /// The server's id of the instance (`ip#port#cluster#group@@service`
    /// on Java Nacos, `ip#port` on rnacos).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// Its IP (or host name).
    pub ip: String,
    /// Its port.
    pub port: i64,
    /// Its weight (Nacos: a float, 1.0 by default).
    pub weight: f64,
    /// Whether it is healthy.
    pub healthy: bool,
    /// Whether it takes traffic.
    pub enabled: bool,
    /// Whether it lives with its connection.
    pub ephemeral: bool,
    /// Its cluster.
    pub cluster_name: Option<String>,
    /// `group@@service` (as the server reports it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Its metadata: a flat map of strings.
    pub metadata: BTreeMap<String, String>,
}

/// `InstanceRequest`: register or deregister one instance of this
/// connection.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRequest {
    /// Namespace, service and group.
    #[serde(flatten)]
    pub head: NamingHead,
    /// `registerInstance` or `deregisterInstance`.
    pub r#type: &'static str,
    /// The instance.
    pub instance: NacosInstance,
}

/// `SubscribeServiceRequest`: subscribe (pushes follow on the bi-stream)
/// or unsubscribe.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeServiceRequest {
    /// Namespace, service and group.
    #[serde(flatten)]
    pub head: NamingHead,
    /// Every cluster: empty.
    pub clusters: String,
    /// `true` to subscribe, `false` to unsubscribe.
    pub subscribe: bool,
}

/// `ServiceQueryRequest`: the full list of a service.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceQueryRequest {
    /// Namespace, service and group.
    #[serde(flatten)]
    pub head: NamingHead,
    /// Every cluster: empty.
    pub cluster: String,
    /// Every instance, healthy or not (rnacos defaults to healthy only).
    pub healthy_only: bool,
    /// No UDP push.
    pub udp_port: i32,
}

/// The full list of one service, as answers and pushes carry it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceInfo {
    /// The service name.
    pub name: Option<String>,
    /// Its group.
    pub group_name: Option<String>,
    /// Every instance, as the server wrote it (decoded one by one, so a
    /// bad record is skipped alone, and an unchanged one is not decoded
    /// again).
    pub hosts: Option<Vec<Box<serde_json::value::RawValue>>>,
    /// The server's time of the list (ms).
    pub last_ref_time: i64,
}

/// An answer (its common fields checked by the call) carrying a [`ServiceInfo`] (`SubscribeServiceResponse`,
/// `QueryServiceResponse`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceInfoResponse {
    /// The list.
    pub service_info: Option<ServiceInfo>,
}

/// A request the server sends on the bi-stream: its id (to answer) and,
/// for a `NotifySubscriberRequest`, the pushed list.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerRequest {
    /// The id the answer must carry.
    pub request_id: Option<String>,
    /// The pushed list (`NotifySubscriberRequest`).
    pub service_info: Option<ServiceInfo>,
    /// Where to reconnect (`ConnectResetRequest`).
    pub server_ip: Option<String>,
    /// Its port (`ConnectResetRequest`).
    pub server_port: Option<String>,
    /// The changed item's data id (`ConfigChangeNotifyRequest`).
    pub data_id: Option<String>,
    /// Its group (`ConfigChangeNotifyRequest`).
    pub group: Option<String>,
}

/// The answer to a server's request.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    /// The id of the request answered.
    pub request_id: String,
    /// 200.
    pub result_code: i32,
    /// 0.
    pub error_code: i32,
}

/// `HealthCheckRequest` (unary): is the connection alive on the server?
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckRequest {
    /// Request headers.
    pub headers: HashMap<String, String>,
    /// Request id.
    pub request_id: String,
}

/// A request of the config module: one config item.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigHead {
    /// Request headers.
    pub headers: HashMap<String, String>,
    /// Request id.
    pub request_id: String,
    /// Always `config`.
    pub module: &'static str,
    /// The item's data id.
    pub data_id: String,
    /// The item's group.
    pub group: String,
    /// The namespace.
    pub tenant: String,
}

/// `ConfigQueryRequest` (and `ConfigRemoveRequest`, same fields).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigItemRequest {
    /// The item.
    #[serde(flatten)]
    pub head: ConfigHead,
}

/// `ConfigQueryResponse`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigQueryResponse {
    /// The item's content.
    pub content: Option<String>,
    /// Its MD5 (lowercase hex).
    pub md5: Option<String>,
}

/// `ConfigPublishRequest`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigPublishRequest {
    /// The item.
    #[serde(flatten)]
    pub head: ConfigHead,
    /// The new content.
    pub content: String,
    /// Compare-and-swap: the MD5 of the content this write replaces
    /// (Java Nacos refuses the write when it changed; rnacos ignores it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cas_md5: Option<String>,
}

/// One item a `ConfigBatchListenRequest` listens to.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenContext {
    /// The item's data id.
    pub data_id: String,
    /// Its group.
    pub group: String,
    /// The namespace.
    pub tenant: String,
    /// The MD5 of the content held (empty: none).
    pub md5: String,
}

/// `ConfigBatchListenRequest`: listen to (or stop listening to) items;
/// changes come as `ConfigChangeNotifyRequest`s on the stream.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigBatchListenRequest {
    /// Request headers.
    pub headers: HashMap<String, String>,
    /// Request id.
    pub request_id: String,
    /// Always `config`.
    pub module: &'static str,
    /// `true` to listen, `false` to stop.
    pub listen: bool,
    /// The items.
    pub config_listen_contexts: Vec<ListenContext>,
}
