//! A layer applies whatever locker it is given: the locker's settings were checked when it was
//! built, so applying a layer never fails.

use super::*;
use crate::Locker;

#[tokio::test]
async fn a_fair_lockers_read_write_layer_serves_readers_and_writers() {
    let locker = Locker::builder(MemoryBackend::new())
        .fair(Duration::from_secs(3))
        .build()
        .expect("fair on a backend with a wait queue");
    let app = Router::new()
        .route("/", get(|| async {}).post(|| async {}))
        .route_layer(LockLayer::new(locker, header("x-key")).read_write());

    let read = send(&app, keyed(Method::GET, "k", 0)).await;
    let write = send(&app, keyed(Method::POST, "k", 1)).await;

    assert_eq!(
        (read.status, write.status),
        (StatusCode::OK, StatusCode::OK)
    );
}
