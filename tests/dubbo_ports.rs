//! A Dubbo provider may publish a service without a port (0): each
//! instance's URL then takes its own `dubbo.endpoints` port of the
//! service's protocol, else its instance port, as Dubbo consumers build
//! them. Instances sharing the revision (one cached MetadataInfo) keep
//! their own ports.

mod common;

use std::time::Duration;

use steadfast::Registry;
use steadfast_testkit::MetadataBuilder;

use common::{instance, Fixture, APP, IFACE};

#[actix_rt::test]
async fn a_portless_service_takes_each_instances_own_port() {
    let fx = Fixture::start();
    let info = MetadataBuilder::new(APP).service(IFACE, "tri", 0).build();
    fx.fetcher.serve(info.clone());
    let dir = fx.subscribe().await;
    for (port, tri) in [(8001, Some(7001)), (8002, Some(7002)), (8003, None)] {
        let mut inst = instance(&info, port);
        if let Some(tri) = tri {
            inst.metadata.insert(
                "dubbo.endpoints".into(),
                format!(
                    r#"[{{"port":20880,"protocol":"dubbo"}},{{"port":{tri},"protocol":"tri"}}]"#
                ),
            );
        }
        fx.registry.register(inst).await.unwrap();
    }
    let view = common::wait_for(&dir, "three endpoints", Duration::from_secs(10), |v| {
        v.endpoints.len() == 3
    })
    .await;
    assert_eq!(common::ports(&view), vec![7001, 7002, 8003]);
    assert_eq!(
        fx.fetcher.calls(&info.revision),
        1,
        "one fetch for the shared revision"
    );
}
