//! A store that stops answering: an error within the store timeout, never a hang, and service
//! again once it answers.

use std::time::Duration;

use tokio::time::Instant;

use super::Outage;
use super::support::{LONG, locker};
use crate::LockError;

/// While the store answers nothing, an acquire fails with `StoreUnavailable` within the store
/// timeout (and a little slack); once it answers again, locks are taken again.
pub async fn a_silent_store_is_an_error_within_the_store_timeout<S: Outage>(store: &S) {
    let store_timeout = Duration::from_millis(300);
    let configure =
        |builder: crate::LockerBuilder<_>| builder.reject().ttl(LONG).store_timeout(store_timeout);
    let locker = locker(store.backend().await, configure);
    locker
        .lock("warm-up")
        .await
        .expect("the store answers")
        .release()
        .await
        .ok();

    store.stop_answering();
    let started = Instant::now();
    let silent = locker.lock("k").await;
    let waited = started.elapsed();
    store.answer_again();

    assert!(
        matches!(silent, Err(LockError::StoreUnavailable(_))),
        "{silent:?}"
    );
    assert!(
        waited < store_timeout + Duration::from_millis(700),
        "answered after {waited:?}"
    );
    let started = Instant::now();
    while locker.lock("other").await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the store never served again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
