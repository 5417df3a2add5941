//! Unit tests of the mapping keys and the sans-IO mapping view.

use super::*;
use crate::wire::{Event, KeyValue, ResponseHeader};

fn kv(key: &str, rev: i64) -> KeyValue {
    KeyValue {
        key: key.as_bytes().to_vec(),
        mod_revision: rev,
        ..KeyValue::default()
    }
}

#[test]
fn names_are_encoded_so_no_slash_reaches_another_key() {
    let l = KeyLayout::new("/t/1/");
    assert_eq!(
        l.mapping_key("demo.Greeter", "app-1"),
        "/t/1/mapping/demo.Greeter/app-1"
    );
    let evil = l.mapping_key("a/../b", "x/y");
    assert_eq!(evil, "/t/1/mapping/a%2F..%2Fb/x%2Fy");
    assert!(!l.mapping_prefix("a/").starts_with(&l.mapping_prefix("a")));
    assert_eq!(
        l.mapped_app("a/../b", evil.as_bytes()).as_deref(),
        Some("x/y")
    );
    // Odd UTF-8, spaces, percent signs, control characters all round-trip.
    for name in [
        "Grüße.Dienst",
        "服务/接口",
        "a b%20c",
        "tab\there",
        "💥",
        "%",
        "\u{0}",
    ] {
        let enc = encode_segment(name);
        assert!(!enc.contains('/'), "{enc}");
        assert!(enc.is_ascii());
        assert_eq!(decode_segment(&enc).as_deref(), Some(name), "{enc}");
        let key = l.mapping_key(name, name);
        assert_eq!(l.mapped_app(name, key.as_bytes()).as_deref(), Some(name));
    }
    // Keys this layout never writes are refused, never a panic.
    for bad in ["%", "%4", "%ZZ", "a/b", "ü", "%FF", "%C3"] {
        assert_eq!(decode_segment(bad), None, "{bad}");
    }
    assert_eq!(l.mapped_app("i", b"/t/1/mapping/i/"), None, "empty app");
    assert_eq!(
        l.mapped_app("i", b"/t/1/mapping/ix/a"),
        None,
        "another interface"
    );
    assert_eq!(l.mapped_app("i", &[0xff, 0xfe]), None, "not UTF-8");
    assert!(check_mapping("", "a").is_err() && check_mapping("i", "").is_err());
}

#[test]
fn the_view_yields_the_whole_set_after_each_change() {
    let l = KeyLayout::new("/p");
    let mut v = MappingView::new(l.clone(), "i", 0);
    let range = RangeResponse {
        header: ResponseHeader {
            revision: 7,
            ..ResponseHeader::default()
        },
        kvs: vec![
            kv(&l.mapping_key("i", "b"), 3),
            kv(&l.mapping_key("i", "a"), 5),
        ],
        ..RangeResponse::default()
    };
    assert!(v.apply_range(&range));
    assert!(!v.apply_range(&range), "same set");
    assert_eq!(v.resume_from(), 8);
    assert_eq!(v.event().apps, vec!["a", "b"]);
    assert_eq!(v.event().version, Version::at(7));

    let put = |app: &str, rev| Event {
        kind: EventType::Put,
        kv: kv(&l.mapping_key("i", app), rev),
        prev_kv: None,
    };
    let msg = |events| WatchResponse {
        events,
        ..WatchResponse::default()
    };
    assert_eq!(v.apply(&msg(vec![put("c", 9)])), MappingStep::Changed);
    assert_eq!(v.event().apps, vec!["a", "b", "c"]);
    assert_eq!(v.apply(&msg(vec![put("a", 10)])), MappingStep::Unchanged);
    let del = Event {
        kind: EventType::Delete,
        kv: kv(&l.mapping_key("i", "b"), 11),
        prev_kv: None,
    };
    let foreign = Event {
        kind: EventType::Put,
        kv: kv("/p/mapping/i/%ZZ", 12),
        prev_kv: None,
    };
    assert_eq!(v.apply(&msg(vec![del, foreign])), MappingStep::Changed);
    assert_eq!(v.event().apps, vec!["a", "c"]);
    assert_eq!(v.resume_from(), 13);
    let cancel = WatchResponse {
        canceled: true,
        compact_revision: 10,
        ..WatchResponse::default()
    };
    assert_eq!(v.apply(&cancel), MappingStep::Resync);
    let progress = WatchResponse::default();
    assert_eq!(v.apply(&progress), MappingStep::Unchanged);
}
