//! MetadataInfoV2 <-> Steadfast's [`MetadataInfo`].
//!
//! What an answer means: an empty message, or one for another revision,
//! is "revision not served" ([`FetchError::UnknownRevision`], retried with
//! backoff), because a Java provider answers an unknown revision with a
//! null message; another app is a [`FetchError::Mismatch`]; a service that
//! cannot be a service (no name or protocol, a port above 65535) is
//! [`FetchError::Malformed`]. A service without a port (0 or less) keeps
//! port 0: each instance's URL derives its own, as Dubbo consumers do
//! (core's `derived_port`), so instances sharing the revision keep their
//! own ports.

use std::collections::BTreeMap;

use steadfast_core::{FetchError, MetadataInfo, ServiceInfo, ServiceInstance};

use crate::wire::{MetadataInfoV2, ServiceInfoV2};

/// Text from an answer, cut to 60 characters and escaped, for an error.
fn shown(text: &str) -> String {
    steadfast_core::excerpt(text, 60)
}

/// The MetadataInfo `answer` describes for `revision`, asked of `instance`.
pub fn from_v2(
    answer: MetadataInfoV2,
    instance: &ServiceInstance,
    revision: &str,
) -> Result<MetadataInfo, FetchError> {
    if answer.version != revision {
        // Empty (a null answer) or another revision: not served (yet).
        return Err(FetchError::UnknownRevision(revision.to_string()));
    }
    if answer.app != instance.app {
        return Err(FetchError::Mismatch {
            expected: format!("{}@{revision}", instance.app),
            actual: format!("{}@{}", shown(&answer.app), shown(&answer.version)),
        });
    }
    let mut services = BTreeMap::new();
    for (_, s) in answer.services {
        let service = service_from_v2(s)?;
        services.insert(service.match_key(), service);
    }
    Ok(MetadataInfo {
        app: answer.app,
        revision: answer.version,
        services,
    })
}

fn service_from_v2(s: ServiceInfoV2) -> Result<ServiceInfo, FetchError> {
    if s.name.is_empty() || s.protocol.is_empty() {
        return Err(FetchError::Malformed(format!(
            "service \"{}\" has no name or no protocol",
            shown(&s.name)
        )));
    }
    let port = match s.port {
        p if p <= 0 => 0,
        p => u16::try_from(p).map_err(|_| {
            FetchError::Malformed(format!("service \"{}\" port {p}", shown(&s.name)))
        })?,
    };
    let some = |v: String| Some(v).filter(|v| !v.is_empty());
    Ok(ServiceInfo {
        name: s.name,
        group: some(s.group),
        version: some(s.version),
        protocol: s.protocol,
        port,
        path: s.path,
        params: s.params.into_iter().collect(),
    })
}

/// The MetadataInfoV2 a provider answers for `info`.
pub fn to_v2(info: &MetadataInfo) -> MetadataInfoV2 {
    MetadataInfoV2 {
        app: info.app.clone(),
        version: info.revision.clone(),
        services: info
            .services
            .iter()
            .map(|(key, s)| {
                let v2 = ServiceInfoV2 {
                    name: s.name.clone(),
                    group: s.group.clone().unwrap_or_default(),
                    version: s.version.clone().unwrap_or_default(),
                    protocol: s.protocol.clone(),
                    port: i32::from(s.port),
                    path: s.path.clone(),
                    params: s.params.clone().into_iter().collect(),
                };
                (key.clone(), v2)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
