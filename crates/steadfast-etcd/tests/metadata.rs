//! Remote metadata report in a real etcd: publish, fetch, every error
//! mapping, withdraw, and the fallback fetcher.

mod common;

use common::*;
use steadfast_core::{FallbackFetcher, FetchError, MetadataFetcher, MetadataPublisher};
use steadfast_etcd::harness::{free_ports, EtcdServer};
use steadfast_etcd::{EtcdMetadataReport, EtcdRegistry};

#[tokio::test]
async fn publish_fetch_errors_withdraw_and_fallback() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let cfg = config(vec![etcd.endpoint()]);
        let reg = EtcdRegistry::new(cfg.clone()).unwrap();
        let report = reg.metadata_report();
        let raw = client(vec![etcd.endpoint()]);
        let web = inst("web", "10.0.0.1");
        let i1 = info("web", 50051);

        report.publish(&i1).await.unwrap();
        assert_eq!(report.fetch(&web, &i1.revision).await, Ok(i1.clone()));
        // A second report on the same prefix (own client) sees it too.
        let other = EtcdMetadataReport::new(&cfg).unwrap();
        assert_eq!(other.fetch(&web, &i1.revision).await, Ok(i1.clone()));

        assert_eq!(
            report.fetch(&web, "nope").await,
            Err(FetchError::UnknownRevision("nope".into()))
        );
        // Another app's instance asks under its own app.
        let db = inst("db", "10.0.0.2");
        assert!(matches!(
            report.fetch(&db, &i1.revision).await,
            Err(FetchError::UnknownRevision(_))
        ));
        raw.put(report.key_of("web", "bad").as_bytes(), b"{oops", 0)
            .await
            .unwrap();
        assert!(matches!(
            report.fetch(&web, "bad").await,
            Err(FetchError::Malformed(_))
        ));
        let stray = serde_json::to_vec(&i1).unwrap();
        raw.put(report.key_of("web", "other").as_bytes(), &stray, 0)
            .await
            .unwrap();
        assert!(matches!(
            report.fetch(&web, "other").await,
            Err(FetchError::Mismatch { .. })
        ));

        // Through the core trait: publish another revision, withdraw it.
        let i2 = info("web", 50052);
        let publisher: &dyn MetadataPublisher = &report;
        publisher.publish(i2.clone()).await.unwrap();
        assert_eq!(report.fetch(&web, &i2.revision).await, Ok(i2.clone()));
        publisher.withdraw("web", &i2.revision).await.unwrap();
        assert!(matches!(
            report.fetch(&web, &i2.revision).await,
            Err(FetchError::UnknownRevision(_))
        ));

        // Nothing listens on a fresh free port: etcd is "down".
        let dead_port = free_ports(1).unwrap()[0];
        let dead = EtcdMetadataReport::new(&config(vec![format!("http://127.0.0.1:{dead_port}")]))
            .unwrap();
        assert!(matches!(
            dead.fetch(&web, &i1.revision).await,
            Err(FetchError::Unreachable(_))
        ));

        let rescued = FallbackFetcher::new(dead.clone(), report.clone());
        assert_eq!(rescued.fetch(&web, &i1.revision).await, Ok(i1.clone()));
        let direct = FallbackFetcher::new(report.clone(), dead.clone());
        assert_eq!(direct.fetch(&web, &i1.revision).await, Ok(i1.clone()));
        let neither = FallbackFetcher::new(dead.clone(), dead);
        assert!(matches!(
            neither.fetch(&web, &i1.revision).await,
            Err(FetchError::Unreachable(_))
        ));
    })
    .await;
}
