//! The consumer side: [`Caller`](crate::caller) (see the crate docs).
