//! The builder refuses a configuration no retry loop can live with, with a
//! typed error naming the field, instead of panicking later in a timer.

use std::time::Duration;

use steadfast::{BackoffPolicy, ConfigError, Engine, EngineError};

#[actix_rt::test]
async fn absurd_values_are_refused_at_start_with_their_field() {
    let huge = BackoffPolicy {
        max: Duration::MAX,
        ..BackoffPolicy::default()
    };
    match Engine::builder().backoff(huge).start() {
        Err(EngineError::InvalidConfig(ConfigError::Backoff { field, .. })) => {
            assert_eq!(field, "backoff")
        }
        other => panic!("expected a refused backoff, got {:?}", other.err()),
    }
    match Engine::builder().fetch_timeout(Duration::ZERO).start() {
        Err(EngineError::InvalidConfig(ConfigError::Duration { field, .. })) => {
            assert_eq!(field, "fetch_timeout")
        }
        other => panic!("expected a refused timeout, got {:?}", other.err()),
    }
    let engine = Engine::builder().start().expect("defaults are valid");
    engine.shutdown().await;
}
