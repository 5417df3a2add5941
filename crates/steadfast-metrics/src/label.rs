//! Label values and help texts in the text exposition: escaped here, once.
//!
//! `prometheus-client` writes label values and help texts as given, and the
//! values here come from the registry (app names any provider can publish,
//! interface names read from mapping keys), so a value holding `"`, `\` or
//! a line feed would end its label, its sample or its line and forge
//! samples, types or a second `# EOF`. Every label value of the exposition
//! is a [`LabelValue`], whose only constructor escapes (the gathered
//! families and the select probe both take [`crate::collect::Labels`]).
//! Metric names and help texts are constants of this crate and of the
//! counter tables, not registry text; still, the collector passes each
//! family's help through [`escape`] and leaves out a family whose name is
//! not a metric name.
//!
//! The rules (OpenMetrics text 1.0.0 `escaped-string`, which the Prometheus
//! text format shares for label values):
//!
//! - `\` is written `\\`, `"` is written `\"`, a line feed is written `\n`;
//! - every other control character (Unicode `Cc`: U+0000 to U+001F, U+007F
//!   to U+009F, among them carriage return, tab, escape and NEL) and the
//!   line and paragraph separators U+2028 and U+2029 are written as
//!   U+FFFD (the replacement character).
//!
//! The second rule is a choice. The format has no escape for a carriage
//! return and allows it raw, and a conforming parser (Prometheus) splits
//! lines at line feeds only; but a raw CR is a line break to universal-
//! newline readers (a scrape saved to a file and read back in Python, for
//! one), and CR or ESC written to a terminal (`curl /metrics`) can make a
//! forged line appear on screen. An escape such as `\r` would not be
//! conforming (a strict parser could reject the whole scrape, so one hostile
//! name would hide every metric) and Prometheus would read it back as the
//! two characters `\r`. So those characters are replaced: the label is
//! lossy for names holding control characters (no legitimate app or
//! interface name does), exact for everything else. Two names that differ
//! only in such characters get the same label value and are summed as one
//! series (never written twice).

use std::borrow::Cow;
use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// What a replaced character is written as.
const REPLACEMENT: char = '\u{FFFD}';

/// Whether `c` is written as [`REPLACEMENT`]: a control character other
/// than the line feed (which has its escape), or a line or paragraph
/// separator.
fn replaced(c: char) -> bool {
    (c.is_control() && c != '\n') || c == '\u{2028}' || c == '\u{2029}'
}

/// `raw` as a label value (or help text) of the text exposition: `\`, `"`
/// and line feed escaped, other line breaks and control characters
/// replaced (see the module documentation). Borrows when nothing changes.
pub(crate) fn escape(raw: &str) -> Cow<'_, str> {
    if !raw
        .chars()
        .any(|c| matches!(c, '\\' | '"' | '\n') || replaced(c))
    {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len() + 8);
    for c in raw.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if replaced(c) => out.push(REPLACEMENT),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether `name` is a metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub(crate) fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// One label value, held escaped: built only by [`LabelValue::new`] (or
/// `From`), which escapes, and written as held. Equality and hashing are
/// those of the escaped text, so two samples whose values escape alike are
/// one series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LabelValue(String);

impl LabelValue {
    /// `raw`, escaped for the exposition.
    pub(crate) fn new(raw: &str) -> Self {
        Self(escape(raw).into_owned())
    }
}

impl From<&str> for LabelValue {
    fn from(raw: &str) -> Self {
        Self::new(raw)
    }
}

impl From<String> for LabelValue {
    fn from(raw: String) -> Self {
        Self::new(&raw)
    }
}

impl From<&String> for LabelValue {
    fn from(raw: &String) -> Self {
        Self::new(raw)
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_per_openmetrics_and_replaces_other_line_breaks() {
        assert!(matches!(escape("greeter-1.demo"), Cow::Borrowed(_)));
        assert_eq!(escape(r#"a"b"#), r#"a\"b"#);
        assert_eq!(escape(r"a\b"), r"a\\b");
        assert_eq!(escape("x\n# EOF"), r"x\n# EOF");
        assert_eq!(escape("}"), "}");
        assert_eq!(
            escape("a\rb\tc\u{1b}d\u{85}e\u{2028}f"),
            "a\u{FFFD}b\u{FFFD}c\u{FFFD}d\u{FFFD}e\u{FFFD}f"
        );
        assert_eq!(escape("é💥\u{10FFFF}"), "é💥\u{10FFFF}");
        assert_eq!(LabelValue::new("a\"b"), LabelValue::from("a\"b"));
    }

    #[test]
    fn metric_names() {
        assert!(valid_metric_name("steadfast_app_instances"));
        assert!(valid_metric_name("a:b_1"));
        for bad in ["", "1a", "a b", "a\n", "a{", "é"] {
            assert!(!valid_metric_name(bad), "{bad:?}");
        }
    }
}
