//! Settings that contradict each other are reported as errors when the layer is checked, never
//! as a panic in a setter and never by silently dropping one of them.

use super::*;
use crate::ConfigError;

const SECOND: Duration = Duration::from_secs(1);

fn layer() -> LockLayer<MemoryBackend, Header> {
    LockLayer::new(MemoryBackend::new(), header("x-key"))
}

#[test]
fn bad_values_are_errors_not_panics() {
    assert_eq!(
        layer().store_timeout(Duration::ZERO).validate(),
        Err(ConfigError::ZeroStoreTimeout)
    );
    assert_eq!(
        layer().fair(Duration::ZERO).validate(),
        Err(ConfigError::TicketTtlTooShort(Duration::ZERO))
    );
    assert_eq!(
        layer().ttl(Duration::ZERO).validate(),
        Err(ConfigError::TtlTooShort(Duration::ZERO))
    );
    assert_eq!(layer().semaphore(0).validate(), Err(ConfigError::NoPermits));
}

#[test]
fn the_first_refused_setting_is_the_one_reported() {
    let layer = layer().store_timeout(Duration::ZERO).ttl(Duration::ZERO);
    assert_eq!(layer.validate(), Err(ConfigError::ZeroStoreTimeout));
}

#[test]
fn contradicting_wait_settings_are_refused_in_either_order() {
    let ticket = 3 * SECOND;
    assert_eq!(
        layer().fair(ticket).wait_polling(SECOND).validate(),
        Err(ConfigError::FairPolling)
    );
    assert_eq!(
        layer().wait_polling(SECOND).fair(ticket).validate(),
        Err(ConfigError::FairPolling)
    );
    assert_eq!(
        layer().fair(ticket).reject().validate(),
        Err(ConfigError::FairWithoutWaiting)
    );
    assert_eq!(
        layer().fair(ticket).read_write().validate(),
        Err(ConfigError::FairSharedHolds)
    );
}

#[test]
fn a_wait_after_fair_keeps_fairness() {
    let layer = layer().fair(3 * SECOND).wait(SECOND);
    assert_eq!(layer.validate(), Ok(()));
    assert!(
        format!("{:?}", layer.locker()).contains("Fair"),
        "{:?}",
        layer.locker()
    );
}

#[test]
#[should_panic(expected = "invalid LockLayer settings: the store timeout must be longer than zero")]
fn applying_a_refused_layer_panics_with_its_error() {
    let _ = Router::<()>::new()
        .route("/", post(|| async {}))
        .route_layer(layer().store_timeout(Duration::ZERO));
}
