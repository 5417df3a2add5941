//! Key layout and record decoding.
//!
//! Instances live at `<prefix>/services/<app>/<instance-id>` with the
//! [`ServiceInstance`] as JSON (a Dubbo provider's record there, Java or Go
//! spelling, reads too: see `dubbo.rs`); remote metadata at
//! `<prefix>/metadata/<app>/<revision>` with the MetadataInfo as JSON.
//! Watches and lists use the prefix `<prefix>/services/<app>/` including the
//! trailing slash, so app `web` never matches `webx`.

use steadfast_core::{Instance, RegistryError, RevisionInterner, ServiceInstance};

use crate::error::InvalidRecord;
use crate::wire::KeyValue;

/// Where records live in the etcd keyspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// A layout under `prefix` (trailing slashes dropped; `""` is allowed
    /// and puts records under `/services/...`).
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// The normalised prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>/services/<app>/`: the range and watch prefix of one app.
    pub fn app_prefix(&self, app: &str) -> String {
        format!("{}/services/{app}/", self.prefix)
    }

    /// `<prefix>/services/<app>/<id>`.
    pub fn instance_key(&self, app: &str, id: &str) -> String {
        format!("{}/services/{app}/{id}", self.prefix)
    }

    /// `<prefix>/metadata/<app>/<revision>`.
    pub fn metadata_key(&self, app: &str, revision: &str) -> String {
        format!("{}/metadata/{app}/{revision}", self.prefix)
    }

    /// The instance id named by `key`, which must be `<app prefix><id>` with
    /// a non-empty id without `/`.
    pub fn instance_id<'k>(&self, app: &str, key: &'k [u8]) -> Result<&'k str, InvalidRecord> {
        let bad = || InvalidRecord::BadKey(String::from_utf8_lossy(key).into_owned());
        let key = std::str::from_utf8(key).map_err(|_| bad())?;
        // `<prefix>/services/<app>/` matched piece by piece: no prefix
        // string is built per key (a full state decodes one per instance).
        let id = key
            .strip_prefix(self.prefix.as_str())
            .and_then(|k| k.strip_prefix("/services/"))
            .and_then(|k| k.strip_prefix(app))
            .and_then(|k| k.strip_prefix('/'))
            .ok_or_else(bad)?;
        if id.is_empty() || id.contains('/') {
            return Err(bad());
        }
        Ok(id)
    }

    /// Decodes the record stored under `key` for `app`: the key must follow
    /// the layout, the value must be ServiceInstance JSON whose `app` and
    /// `id` match the key.
    pub fn decode_instance(
        &self,
        app: &str,
        key: &[u8],
        value: &[u8],
    ) -> Result<ServiceInstance, InvalidRecord> {
        let id = self.instance_id(app, key)?;
        let key_str = || String::from_utf8_lossy(key).into_owned();
        let inst: ServiceInstance = match serde_json::from_slice(value) {
            Ok(inst) => inst,
            // Not Steadfast's JSON: a Dubbo provider's record, or bad.
            Err(e) => match crate::dubbo::decode(app, id, key, value)? {
                Some(inst) => return Ok(inst),
                None => {
                    return Err(InvalidRecord::BadJson {
                        key: key_str(),
                        reason: e.to_string(),
                    })
                }
            },
        };
        if inst.app != app {
            return Err(InvalidRecord::ForeignApp {
                key: key_str(),
                expected: app.to_string(),
                actual: inst.app,
            });
        }
        if inst.id != id {
            return Err(InvalidRecord::IdMismatch {
                key: key_str(),
                expected: id.to_string(),
                actual: inst.id,
            });
        }
        Ok(inst)
    }
}

impl KeyLayout {
    /// Decodes the pair `kv` of `app` into the shared form the watch path
    /// carries (as [`KeyLayout::decode_instance`] checks it), with the key's
    /// `create_revision` as its incarnation's creation marker: a record etcd
    /// replays keeps it, a new registration of the key gets a new one.
    pub fn decode_shared(
        &self,
        app: &str,
        kv: &KeyValue,
        revisions: &mut RevisionInterner,
    ) -> Result<Instance, InvalidRecord> {
        let record = self.decode_instance(app, &kv.key, &kv.value)?;
        let created = u64::try_from(kv.create_revision).unwrap_or(0);
        Ok(Instance::from_record(record, revisions).with_created(created))
    }
}

/// Checks that `name` (an app, instance id or revision) can be one path
/// segment of a key: non-empty, no `/`.
pub fn check_segment(what: &str, name: &str) -> Result<(), RegistryError> {
    if name.is_empty() || name.contains('/') {
        Err(RegistryError::Rejected(format!(
            "{what} {name:?} cannot be a key segment (empty or contains '/')"
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(i: &ServiceInstance) -> Vec<u8> {
        serde_json::to_vec(i).unwrap()
    }

    #[test]
    fn decodes_valid_records_and_names_every_kind_of_invalid_one() {
        let l = KeyLayout::new("/t/1/");
        assert_eq!(l.app_prefix("web"), "/t/1/services/web/");
        let i = ServiceInstance::new("web", "10.0.0.1", 80);
        let key = l.instance_key("web", &i.id);
        assert_eq!(
            l.decode_instance("web", key.as_bytes(), &json(&i)),
            Ok(i.clone())
        );

        let bad_key = b"/t/1/services/web/a/b";
        assert!(matches!(
            l.decode_instance("web", bad_key, &json(&i)),
            Err(InvalidRecord::BadKey(_))
        ));
        assert!(matches!(
            l.decode_instance("web", b"/t/1/services/web/", &json(&i)),
            Err(InvalidRecord::BadKey(_))
        ));
        assert!(matches!(
            l.decode_instance("web", b"/t/1/services/webx/i", &json(&i)),
            Err(InvalidRecord::BadKey(_))
        ));
        assert!(matches!(
            l.decode_instance("web", key.as_bytes(), b"{not json"),
            Err(InvalidRecord::BadJson { .. })
        ));
        assert!(matches!(
            l.decode_instance(
                "web",
                key.as_bytes(),
                br#"{"id":"10.0.0.1:80","app":"web"}"#
            ),
            Err(InvalidRecord::BadJson { .. })
        ));
        let foreign = ServiceInstance::new("db", "10.0.0.1", 80);
        assert!(matches!(
            l.decode_instance("web", key.as_bytes(), &json(&foreign)),
            Err(InvalidRecord::ForeignApp { .. })
        ));
        let other = ServiceInstance::new("web", "10.0.0.2", 80);
        assert!(matches!(
            l.decode_instance("web", key.as_bytes(), &json(&other)),
            Err(InvalidRecord::IdMismatch { .. })
        ));
    }

    /// The key parse matches its definition, `key` stripped of the whole
    /// `app_prefix` string, over random keys built from the pieces that
    /// matter (prefixes, apps and ids sharing characters, slashes, UTF-8).
    #[test]
    fn instance_ids_parse_as_the_app_prefix_defines() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        fn pick(rng: &mut StdRng, k: usize) -> String {
            const PIECES: [&str; 11] = [
                "",
                "/",
                "t",
                "/t",
                "services",
                "/services/",
                "web",
                "webx",
                "é",
                "a/b",
                "1",
            ];
            (0..rng.gen_range(0..=k))
                .map(|_| PIECES[rng.gen_range(0..PIECES.len())])
                .collect()
        }
        let mut rng = StdRng::seed_from_u64(18);
        let mut parsed = 0;
        for _ in 0..20_000 {
            let (prefix, app, id) = (pick(&mut rng, 3), pick(&mut rng, 2), pick(&mut rng, 2));
            let l = KeyLayout::new(&prefix);
            // Half the keys are laid out (around a prefix and app that may
            // or may not be the layout's), half are any string.
            let key = if rng.gen_bool(0.5) {
                let p = if rng.gen_bool(0.7) {
                    l.prefix().to_string()
                } else {
                    pick(&mut rng, 2)
                };
                let a = if rng.gen_bool(0.7) {
                    app.clone()
                } else {
                    pick(&mut rng, 2)
                };
                format!("{p}/services/{a}/{id}")
            } else {
                pick(&mut rng, 6)
            };
            let want = key
                .strip_prefix(&l.app_prefix(&app))
                .filter(|id| !id.is_empty() && !id.contains('/'));
            let got = l.instance_id(&app, key.as_bytes()).ok();
            assert_eq!(got, want, "prefix {prefix:?} app {app:?} key {key:?}");
            parsed += usize::from(got.is_some());
        }
        assert!(parsed > 50, "the keys hit valid ids too: {parsed}");
    }

    #[test]
    fn the_create_revision_marks_the_incarnation_a_replay_keeps_it() {
        let l = KeyLayout::new("/t");
        let mut i = ServiceInstance::new("web", "10.0.0.1", 80);
        steadfast_core::Incarnation {
            export_ms: 9,
            boot_id: "b".into(),
            created: None,
        }
        .stamp(&mut i.metadata);
        let kv = |create_revision: i64, mod_revision: i64| KeyValue {
            key: l.instance_key("web", &i.id).into_bytes(),
            create_revision,
            mod_revision,
            value: json(&i),
            ..KeyValue::default()
        };
        let mut revs = RevisionInterner::default();
        let first = l.decode_shared("web", &kv(5, 5), &mut revs).unwrap();
        let inc = first.incarnation().cloned().unwrap();
        assert_eq!(inc.created.map(|c| c.get()), Some(5));
        let replay = l.decode_shared("web", &kv(5, 8), &mut revs).unwrap();
        assert_eq!(replay.incarnation(), Some(&inc), "a replay: same boot");
        let again = l.decode_shared("web", &kv(9, 9), &mut revs).unwrap();
        assert_ne!(again.incarnation(), Some(&inc), "re-created: another");
        // The marker is the registry's: never written back into the record.
        assert_eq!(first.to_record("web"), i);
        let bad = l.decode_shared("web", &kv(-1, 1), &mut revs).unwrap();
        assert_eq!(bad.incarnation().and_then(|i| i.created), None);
    }

    #[test]
    fn segments_must_be_non_empty_without_slash() {
        assert!(check_segment("app", "web").is_ok());
        assert!(check_segment("app", "").is_err());
        assert!(check_segment("id", "a/b").is_err());
    }
}
