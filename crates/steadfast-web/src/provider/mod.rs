//! The provider side: the in-flight middleware and the graceful shutdown helper.
