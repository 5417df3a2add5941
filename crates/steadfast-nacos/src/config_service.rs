//! The Nacos config service calls this backend needs: read, write and
//! remove one item (under the call deadline, on the client's connection).
//! The remote metadata report and the interface -> app mapping are config
//! items in Dubbo's layout.

use crate::error::NacosError;
use crate::protocol::{
    ConfigHead, ConfigItemRequest, ConfigPublishRequest, ConfigQueryResponse, ResponseHead,
};
use crate::registry::Shared;

/// The error code of "no such config item".
const NOT_FOUND: i32 = 300;

/// A config item as read: its content and MD5.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The content.
    pub content: String,
    /// Its MD5, as the server computed it.
    pub md5: String,
}

impl Shared {
    fn config_head(
        &self,
        conn: &crate::connection::Connection,
        data_id: &str,
        group: &str,
    ) -> ConfigHead {
        ConfigHead {
            request_id: conn.next_id(),
            module: "config",
            data_id: data_id.to_string(),
            group: group.to_string(),
            tenant: self.config.namespace.clone(),
            ..Default::default()
        }
    }

    /// Reads an item (`None`: there is none).
    pub(crate) async fn config_get(
        &self,
        data_id: &str,
        group: &str,
    ) -> Result<Option<Item>, NacosError> {
        let conn = self.wait_connection().await?;
        let request = ConfigItemRequest {
            head: self.config_head(&conn, data_id, group),
        };
        match conn
            .call::<_, ConfigQueryResponse>(
                "ConfigQueryRequest",
                &request,
                self.config.request_timeout,
            )
            .await
        {
            Ok(answer) => Ok(Some(Item {
                content: answer.content.unwrap_or_default(),
                md5: answer.md5.unwrap_or_default(),
            })),
            Err(NacosError::Refused {
                code: NOT_FOUND, ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes an item; `cas_md5` is the MD5 of the content it replaces.
    pub(crate) async fn config_put(
        &self,
        data_id: &str,
        group: &str,
        content: String,
        cas_md5: Option<String>,
    ) -> Result<(), NacosError> {
        let conn = self.wait_connection().await?;
        let request = ConfigPublishRequest {
            head: self.config_head(&conn, data_id, group),
            content,
            cas_md5,
        };
        conn.call::<_, ResponseHead>(
            "ConfigPublishRequest",
            &request,
            self.config.request_timeout,
        )
        .await
        .map(|_| ())
    }

    /// Removes an item (a missing one is not an error).
    pub(crate) async fn config_remove(&self, data_id: &str, group: &str) -> Result<(), NacosError> {
        let conn = self.wait_connection().await?;
        let request = ConfigItemRequest {
            head: self.config_head(&conn, data_id, group),
        };
        match conn
            .call::<_, ResponseHead>("ConfigRemoveRequest", &request, self.config.request_timeout)
            .await
        {
            Ok(_)
            | Err(NacosError::Refused {
                code: NOT_FOUND, ..
            }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
