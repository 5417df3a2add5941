//! A secret value (a password, a token, an inline private key) that never
//! shows itself: its `Debug` and `Serialize` write `<redacted>`, it has no
//! `Display`, and the text is reached only through [`Secret::expose`], so
//! a `debug!(?config)` or a dumped config cannot leak it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What [`Secret`]'s `Debug` and `Serialize` write instead of the value.
pub const REDACTED: &str = "<redacted>";

/// A secret string. Deserializes from a plain string; serializes as
/// [`REDACTED`] (read a secret back from its source, not from a dumped
/// config).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret text, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_string())
    }
}

impl From<&String> for Secret {
    fn from(value: &String) -> Self {
        Self(value.clone())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the value, `Debug` (plain, alternate, nested) and
        /// `Serialize` write exactly the redaction, and deserializing gives
        /// the value back.
        #[test]
        fn neither_debug_nor_serialize_shows_the_value(value in "\\PC{0,40}") {
            let s = Secret::new(value.clone());
            prop_assert_eq!(format!("{s:?}"), REDACTED);
            prop_assert_eq!(format!("{s:#?}"), REDACTED);
            prop_assert_eq!(format!("{:?}", Some(&s)), "Some(<redacted>)");
            prop_assert_eq!(format!("{:?}", vec![s.clone()]), "[<redacted>]");
            prop_assert_eq!(serde_json::to_string(&s).unwrap(), "\"<redacted>\"");
            let back: Secret =
                serde_json::from_str(&serde_json::to_string(&value).unwrap()).unwrap();
            prop_assert_eq!(back.expose(), value.as_str());
        }
    }
}
