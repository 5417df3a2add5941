//! [`Directory`]: the handle a caller picks endpoints from. It holds only a
//! weak address, so it never keeps a closed directory alive.

use actix::WeakAddr;
use steadfast_core::{DirectoryStatus, Reference, ServiceUrl};

use crate::directory_actor::{DirectoryActor, DirectoryView, GetView, SelectEndpoint};
use crate::error::EngineError;

/// Handle to the directory of one reference.
#[derive(Clone, Debug)]
pub struct Directory {
    reference: Reference,
    addr: WeakAddr<DirectoryActor>,
}

impl Directory {
    pub(crate) fn new(reference: Reference, addr: WeakAddr<DirectoryActor>) -> Self {
        Self { reference, addr }
    }

    /// The reference this directory serves.
    pub fn reference(&self) -> &Reference {
        &self.reference
    }

    /// Everything the directory can tell: version, status and endpoints.
    pub async fn view(&self) -> Result<DirectoryView, EngineError> {
        let addr = self.addr.upgrade().ok_or(EngineError::DirectoryClosed)?;
        addr.send(GetView)
            .await
            .ok()
            .flatten()
            .ok_or(EngineError::DirectoryClosed)
    }

    /// Every endpoint.
    pub async fn endpoints(&self) -> Result<Vec<ServiceUrl>, EngineError> {
        Ok(self.view().await?.endpoints)
    }

    /// What the directory can serve, and why.
    pub async fn status(&self) -> Result<DirectoryStatus, EngineError> {
        Ok(self.view().await?.status)
    }

    /// One endpoint picked at random by weight, or `None` when empty.
    pub async fn select(&self) -> Result<Option<ServiceUrl>, EngineError> {
        let addr = self.addr.upgrade().ok_or(EngineError::DirectoryClosed)?;
        addr.send(SelectEndpoint)
            .await
            .ok()
            .flatten()
            .ok_or(EngineError::DirectoryClosed)
    }

    /// Whether the directory actor is still running.
    pub fn is_open(&self) -> bool {
        self.addr.upgrade().is_some()
    }
}
