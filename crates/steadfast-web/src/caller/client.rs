//! The HTTP clients a [`Caller`](super::Caller) sends with. A client is a
//! marker type implementing [`HttpClient`]: its pool's factory, its request
//! and response types, and one attempt. The call loop (pick, lease, retry
//! on another endpoint, budget, deadline) is the same for every client:
//! reqwest ([`Reqwest`], the default) and awc (`Awc`, feature `awc`)
//! differ only in the attempt.

use std::future::Future;

use reqwest::{Method, RequestBuilder, Response};
use steadfast_core::Endpoint;
use steadfast_pool::{ClientFactory, ClientPool, PoolConfig, PooledClient};

use super::run::{Attempted, Bound};
use crate::factory::ReqwestFactory;

/// The pooled client an answer of `H` holds while its body is read.
pub type Held<H> = PooledClient<<<H as HttpClient>::Factory as ClientFactory>::Client>;

/// An HTTP client a [`Caller`](super::Caller) can send with. Sealed: the
/// implementations are [`Reqwest`] and, with the `awc` feature, `Awc`.
pub trait HttpClient: sealed::Sealed + Sized + 'static {
    /// The factory of the pool the clients come from.
    type Factory: ClientFactory;
    /// The request method.
    type Method: Clone;
    /// A request as the caller's shaping closure receives it.
    type Request;
    /// A request as the shaping closure hands it back (ready to send).
    type Sent;
    /// The provider's answer.
    type Response;

    /// `GET`.
    fn get() -> Self::Method;
    /// The shaping of a request sent as it is.
    fn plain(request: Self::Request) -> Self::Sent;
    /// Whether a request with `method` may be sent twice.
    fn is_idempotent(method: &Self::Method) -> bool;
    /// A new pool with [`PoolConfig::default`] of the client's default
    /// factory.
    fn default_pool() -> ClientPool<Self::Factory>;
    /// The status code of an answer.
    fn status(response: &Self::Response) -> u16;

    /// One attempt of `method path` on `endpoint` within `bound`
    /// (`repeatable`: whether the request may be sent again).
    #[doc(hidden)]
    fn attempt<'a, S: Fn(Self::Request) -> Self::Sent>(
        pool: &'a ClientPool<Self::Factory>,
        endpoint: Endpoint,
        method: &'a Self::Method,
        path: &'a str,
        shape: &'a S,
        repeatable: bool,
        bound: Bound,
    ) -> impl Future<Output = Attempted<(Self::Response, Held<Self>)>> + 'a;
}

pub(crate) mod sealed {
    /// Only this crate's clients are [`HttpClient`](super::HttpClient)s.
    pub trait Sealed {}
}

/// reqwest, the default client of a [`Caller`](super::Caller).
#[derive(Clone, Copy, Debug, Default)]
pub struct Reqwest;

impl sealed::Sealed for Reqwest {}

impl HttpClient for Reqwest {
    type Factory = ReqwestFactory;
    type Method = Method;
    type Request = RequestBuilder;
    type Sent = RequestBuilder;
    type Response = Response;

    fn get() -> Method {
        Method::GET
    }

    fn plain(request: RequestBuilder) -> RequestBuilder {
        request
    }

    fn is_idempotent(method: &Method) -> bool {
        super::error::is_idempotent(method)
    }

    fn default_pool() -> ClientPool<ReqwestFactory> {
        ClientPool::new(ReqwestFactory::default(), PoolConfig::default())
    }

    fn status(response: &Response) -> u16 {
        response.status().as_u16()
    }

    fn attempt<'a, S: Fn(Self::Request) -> Self::Sent>(
        pool: &'a ClientPool<ReqwestFactory>,
        endpoint: Endpoint,
        method: &'a Method,
        path: &'a str,
        shape: &'a S,
        repeatable: bool,
        bound: Bound,
    ) -> impl Future<Output = Attempted<(Response, Held<Self>)>> + 'a {
        super::attempt::attempt(pool, endpoint, method, path, shape, repeatable, bound)
    }
}
