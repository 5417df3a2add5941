//! Containing panics of user code: fetchers, registries and publishers are
//! user-supplied, and a panic inside one (while making its future or while
//! the future is polled) must become a typed error, never unwind through an
//! actor. [`contain_call`] is the one wrapper every edge call goes through.

use std::panic::AssertUnwindSafe;

use futures::future::{self, BoxFuture, FutureExt};

use crate::error::{panic_message, PublishError, RegistryError};

/// Calls `call` and polls its future with every panic contained: a panic
/// becomes `Err(panicked(message))`.
pub fn contain_call<T, E>(
    call: impl FnOnce() -> BoxFuture<'static, Result<T, E>>,
    panicked: fn(String) -> E,
) -> BoxFuture<'static, Result<T, E>>
where
    T: Send + 'static,
    E: Send + 'static,
{
    let to_err = move |p: Box<dyn std::any::Any + Send>| Err(panicked(panic_message(p.as_ref())));
    match std::panic::catch_unwind(AssertUnwindSafe(call)) {
        Ok(fut) => AssertUnwindSafe(fut)
            .catch_unwind()
            .map(move |r| r.unwrap_or_else(to_err))
            .boxed(),
        Err(p) => future::ready(to_err(p)).boxed(),
    }
}

/// [`contain_call`] for a registry call: a panic is [`RegistryError::Panicked`].
pub fn contain_registry_call<T: Send + 'static>(
    call: impl FnOnce() -> BoxFuture<'static, Result<T, RegistryError>>,
) -> BoxFuture<'static, Result<T, RegistryError>> {
    contain_call(call, RegistryError::Panicked)
}

/// [`contain_call`] for a publisher call: a panic is [`PublishError::Panicked`].
pub fn contain_publish_call(
    call: impl FnOnce() -> BoxFuture<'static, Result<(), PublishError>>,
) -> BoxFuture<'static, Result<(), PublishError>> {
    contain_call(call, PublishError::Panicked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_while_calling_and_while_polling_become_errors() {
        let at_call = contain_registry_call::<()>(|| panic!("at call"));
        assert_eq!(
            at_call.now_or_never(),
            Some(Err(RegistryError::Panicked("at call".into())))
        );
        let at_poll = contain_registry_call::<()>(|| async { panic!("at poll") }.boxed());
        assert_eq!(
            at_poll.now_or_never(),
            Some(Err(RegistryError::Panicked("at poll".into())))
        );
        let fine = contain_publish_call(|| async { Ok(()) }.boxed());
        assert_eq!(fine.now_or_never(), Some(Ok(())));
    }
}
