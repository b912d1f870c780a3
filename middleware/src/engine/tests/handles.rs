//! Taking, holding, renewing, losing and giving back a lock; what the locker refuses.

use std::time::Duration;

use tokio::time::Instant;

use super::{TTL, locker};
use crate::backend::{Attempt, BackendError, Granted, LockBackend, LockRequest, TokenLease};
use crate::engine::KeyError;
use crate::test_support::{Fault, Hanging, MutexOnly, is_free};
use crate::testing::CountingBackend;
use crate::{ConfigError, LeaseLost, LockError, Locker, MemoryBackend};

#[tokio::test]
async fn with_lock_runs_the_work_holding_the_lock_and_releases_it_after() {
    let store = MemoryBackend::new();
    let locker = Locker::new(store.clone());

    let (held_inside, fence) = locker
        .with_lock("k", |lock| {
            let store = store.clone();
            async move {
                (
                    !is_free(&store, "lock:k").await && lock.is_held(),
                    lock.fence(),
                )
            }
        })
        .await
        .unwrap();

    assert!(held_inside, "the work ran holding the lock");
    assert!(fence.is_some(), "the memory backend fences");
    assert!(is_free(&store, "lock:k").await, "released after the work");
    assert_eq!(locker.held_locks(), 0);
}

#[tokio::test]
async fn a_held_lock_is_released_when_dropped() {
    let store = MemoryBackend::new();
    let locker = Locker::new(store.clone());
    let held = locker.lock("k").await.unwrap();
    assert!(!is_free(&store, "lock:k").await);
    assert_eq!(locker.held_locks(), 1);

    drop(held);
    tokio::task::yield_now().await;

    assert!(
        is_free(&store, "lock:k").await,
        "released in the background"
    );
    assert_eq!(locker.held_locks(), 0);
}

#[tokio::test]
async fn a_busy_lock_is_refused_at_once_with_its_holders_lease() {
    let store = MemoryBackend::new();
    let holder = locker(store.clone(), |locker| locker.ttl(TTL));
    let rejecting = locker(store, |locker| locker.reject());
    let _held = holder.lock("k").await.unwrap();

    let refused = rejecting.lock("k").await;

    let Err(LockError::Busy {
        key, holder_ttl, ..
    }) = refused
    else {
        panic!("{refused:?}");
    };
    assert_eq!(key, "k");
    assert!(holder_ttl.is_some_and(|left| left <= TTL), "{holder_ttl:?}");
}

#[tokio::test]
async fn an_invalid_key_is_refused_before_the_store_is_asked() {
    let backend = CountingBackend::new(MemoryBackend::new());
    let locker = Locker::new(backend.clone());

    let refused = [locker.lock("").await, locker.lock("a{b}").await];
    let none = locker.lock_all(Vec::<String>::new()).await;

    assert!(matches!(
        refused[0],
        Err(LockError::InvalidKey(KeyError::Empty))
    ));
    assert!(matches!(
        refused[1],
        Err(LockError::InvalidKey(KeyError::Brace))
    ));
    assert!(matches!(none, Err(LockError::InvalidKey(KeyError::NoKeys))));
    assert_eq!(backend.counts().total(), 0, "the store was never asked");
}

#[tokio::test(start_paused = true)]
async fn a_held_lock_renews_itself_past_its_ttl() {
    let backend = CountingBackend::new(MemoryBackend::new());
    let ttl = Duration::from_millis(300);
    let locker = locker(backend.clone(), |locker| locker.ttl(ttl).reject());
    let held = locker.lock("k").await.unwrap();

    tokio::time::sleep(ttl * 4).await;

    assert!(held.is_held());
    assert!(
        locker.lock("k").await.is_err(),
        "still held by its renewals"
    );
    assert!(backend.counts().extends >= 8, "renewed every TTL/3");
    held.release().await.unwrap();
    let extends = backend.counts().extends;
    tokio::time::sleep(ttl * 4).await;
    assert_eq!(
        backend.counts().extends,
        extends,
        "no renewal after the release"
    );
}

#[tokio::test(start_paused = true)]
async fn without_renewal_a_held_lock_is_lost_at_its_deadline_and_says_so() {
    let ttl = Duration::from_millis(300);
    let locker = locker(MemoryBackend::new(), |locker| locker.ttl(ttl).renew(false));
    let held = locker.lock("k").await.unwrap();
    let taken = Instant::now();

    let lost = held.lost().await;

    assert_eq!(lost, LeaseLost::Expired);
    assert!(
        taken.elapsed() < ttl,
        "lost by its local deadline, before the store's expiry"
    );
    assert!(!held.is_held());
    assert!(matches!(
        held.release().await,
        Err(LockError::LeaseLost { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_lock_taken_by_someone_else_is_reported_taken_at_the_next_renewal() {
    let ttl = Duration::from_millis(300);
    let locker = locker(MutexOnly::failing(Fault::Stolen), |locker| locker.ttl(ttl));
    let held = locker.lock("k").await.unwrap();
    let taken = Instant::now();

    let lost = held.lost().await;

    assert_eq!(lost, LeaseLost::Taken);
    assert_eq!(taken.elapsed(), ttl / 3, "found at the first renewal");
    assert!(!held.is_held());
    // The store says only that the lease is gone: freed by an operator, or lost in a restart.
    assert_eq!(
        lost.to_string(),
        "a renewal found the lease gone from the store"
    );
}

/// Freed by an operator, a holder learns it at its next renewal — or at its release, if that
/// comes first (who freed it is logged: `tests/traces.rs`).
#[tokio::test(start_paused = true)]
async fn a_holder_freed_by_an_operator_learns_it_at_its_next_renewal_or_release() {
    let ttl = Duration::from_millis(300);
    let store = MemoryBackend::new();
    let worker = locker(store.clone(), |locker| locker.ttl(ttl));
    let operator = locker(store, |locker| locker.holder_label("ops-7"));
    let renewed = worker.lock("k").await.unwrap();
    let taken = Instant::now();

    operator.force_release("k").await.unwrap();
    let lost = renewed.lost().await;

    assert_eq!(lost, LeaseLost::Taken);
    assert_eq!(taken.elapsed(), ttl / 3, "found at the first renewal");

    let released = worker.lock("k").await.unwrap();
    operator.force_release("k").await.unwrap();
    assert!(
        matches!(released.release().await, Err(LockError::LeaseLost { .. })),
        "released before its first renewal, it finds the lease gone"
    );
}

#[tokio::test(start_paused = true)]
async fn with_lock_stops_work_whose_lease_is_lost() {
    let locker = locker(MutexOnly::failing(Fault::Stolen), |locker| {
        locker.ttl(Duration::from_millis(300))
    });
    let finished = std::sync::atomic::AtomicBool::new(false);

    let stopped = locker
        .with_lock("k", |_| async {
            tokio::time::sleep(TTL).await;
            finished.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .await;

    assert!(
        matches!(stopped, Err(LockError::LeaseLost { .. })),
        "{stopped:?}"
    );
    assert!(
        !finished.load(std::sync::atomic::Ordering::SeqCst),
        "no step after the loss ran"
    );
}

#[tokio::test]
async fn a_lost_answer_is_abandoned_so_the_lock_it_took_is_freed() {
    let backend = MutexOnly::failing(Fault::LostAnswers);
    let store = backend.memory().clone();
    let locker = Locker::new(backend);

    let failed = locker.lock("k").await;

    assert!(
        matches!(failed, Err(LockError::StoreUnavailable(_))),
        "{failed:?}"
    );
    // The twin: the store did take the lock for the attempt whose answer was lost...
    assert!(
        !is_free(&store, "lock:k").await,
        "the lost answer's lock is held"
    );
    tokio::task::yield_now().await;
    // ...and the attempt's abandonment, run in the background, gave it back.
    assert!(is_free(&store, "lock:k").await);
}

/// The memory backend, losing the answer to every acquire after it acted on it, whose
/// abandonment of `hangs_on` never answers.
#[derive(Clone)]
struct LostAnswersHangingOn {
    memory: MemoryBackend,
    hangs_on: &'static str,
}

impl LockBackend for LostAnswersHangingOn {
    type Lease = TokenLease;

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let _lost = self.memory.acquire(name, request).await?;
        Err(BackendError::new(
            "the connection dropped before the answer",
        ))
    }

    async fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> Result<Attempt<Vec<Granted<TokenLease>>>, BackendError> {
        let _lost = self.memory.acquire_many(names, request).await?;
        Err(BackendError::new(
            "the connection dropped before the answer",
        ))
    }

    async fn extend(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        self.memory.extend(name, lease, ttl).await
    }

    async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
        self.memory.release(name, lease).await
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        if name == self.hangs_on {
            std::future::pending().await
        } else {
            self.memory.abandon(name, request).await
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_attempt_on_several_keys_gives_each_back_on_its_own() {
    let memory = MemoryBackend::new();
    let hangs_on = "lock:a";
    let locker = Locker::new(LostAnswersHangingOn {
        memory: memory.clone(),
        hangs_on,
    });

    let failed = locker.lock_all(["a", "b"]).await;

    assert!(
        matches!(failed, Err(LockError::StoreUnavailable(_))),
        "{failed:?}"
    );
    tokio::task::yield_now().await;
    // The twin: the lock whose abandonment never answers stays taken...
    assert!(!is_free(&memory, hangs_on).await, "the lost answer took it");
    // ...and holds up no other: the attempt's other lock was given back beside it.
    assert!(is_free(&memory, "lock:b").await);
}

/// An attempt that reaches the store after its own abandonment (sent on another connection of
/// a pool, another stream of etcd's) takes the lock for nobody: the abandonment is made again a
/// store call later, and frees it (found by the simulator, seed 24173, where a session store
/// kept such a lock for as long as the session lived).
#[tokio::test(start_paused = true)]
async fn an_attempt_applied_after_its_abandonment_is_abandoned_again() {
    let store_timeout = Duration::from_millis(20);
    let late = MutexOnly::failing(Fault::AppliedLate(store_timeout * 3 / 2));
    let memory = late.memory().clone();
    let locker = locker(late, |locker| locker.reject().store_timeout(store_timeout));
    let asked = Instant::now();

    let failed = locker.lock("k").await;

    assert!(
        matches!(failed, Err(LockError::StoreUnavailable(_))),
        "{failed:?}"
    );
    tokio::time::sleep_until(asked + store_timeout * 7 / 4).await;
    // The twin: the attempt, applied after the first abandonment, took the lock...
    assert!(
        !is_free(&memory, "lock:k").await,
        "taken after its abandonment"
    );
    tokio::time::sleep_until(asked + store_timeout * 3).await;
    // ...and the second gave it back.
    assert!(is_free(&memory, "lock:k").await);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_does_not_answer_is_unavailable_after_the_store_timeout() {
    let store_timeout = Duration::from_millis(300);
    let locker = locker(Hanging, |locker| locker.store_timeout(store_timeout));
    let started = Instant::now();

    let refused = locker.lock("k").await;

    assert!(
        matches!(refused, Err(LockError::StoreUnavailable(_))),
        "{refused:?}"
    );
    assert_eq!(started.elapsed(), store_timeout);
}

#[test]
fn a_backend_that_vouches_for_short_leases_shortens_the_default_and_refuses_longer_ones() {
    let short = Duration::from_secs(2);
    let backend = MutexOnly::vouching_for(short);

    let defaulted = Locker::builder(backend.clone()).build();
    let longer = Locker::builder(backend).ttl(short * 2).build();

    assert_eq!(defaulted.map(|locker| locker.settings().ttl), Ok(short));
    assert_eq!(
        longer.map(drop),
        Err(ConfigError::TtlTooLongForBackend {
            ttl: short * 2,
            max: short
        })
    );
}

#[test]
fn settings_that_cannot_work_are_refused_when_the_locker_is_built() {
    fn build(
        configure: impl FnOnce(crate::LockerBuilder<Hanging>) -> crate::LockerBuilder<Hanging>,
    ) -> Result<(), ConfigError> {
        configure(Locker::builder(Hanging)).build().map(drop)
    }
    let ms = Duration::from_millis;

    assert_eq!(
        build(|l| l.ttl(ms(1))),
        Err(ConfigError::TtlTooShort(ms(1)))
    );
    assert_eq!(
        build(|l| l.ttl(Duration::MAX)),
        Err(ConfigError::TtlTooLong(Duration::MAX)),
        "a lease past the clock's end cannot be counted"
    );
    assert_eq!(
        build(|l| l.prefix("a{")),
        Err(ConfigError::InvalidPrefix("a{".into()))
    );
    assert_eq!(
        build(|l| l.backoff(ms(20), ms(10))),
        Err(ConfigError::InvalidBackoff {
            initial: ms(20),
            max: ms(10)
        })
    );
    assert_eq!(
        build(|l| l.store_timeout(Duration::ZERO)),
        Err(ConfigError::ZeroStoreTimeout)
    );
    assert_eq!(
        build(|l| l.fair(ms(3000))),
        Err(ConfigError::FairWithoutQueue),
        "a backend without a wait queue cannot serve waiters in order"
    );
    let memory = Locker::builder(MemoryBackend::new()).fair(ms(1)).build();
    assert_eq!(
        memory.map(drop),
        Err(ConfigError::TicketTtlOutOfRange(ms(1)))
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_longer_than_the_clock_can_count_waits_without_end() {
    let store = MemoryBackend::new();
    let holder = Locker::new(store.clone());
    let waiter = Locker::builder(store)
        .wait(Duration::MAX)
        .build()
        .expect("any wait is a valid wait");
    let held = holder.lock("k").await.expect("free");

    let waiting = tokio::spawn(async move { waiter.lock("k").await.map(drop) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release().await.expect("released");

    let waited = waiting.await.expect("the waiter did not panic");
    assert!(waited.is_ok(), "it took the lock once released: {waited:?}");
}

#[test]
fn waiting_settings_combine_in_any_order_and_contradictions_are_refused() {
    use crate::engine::policy::{BusyPolicy, WaitMode};
    fn policy(
        configure: impl FnOnce(
            crate::LockerBuilder<MemoryBackend>,
        ) -> crate::LockerBuilder<MemoryBackend>,
    ) -> Result<BusyPolicy, ConfigError> {
        configure(Locker::builder(MemoryBackend::new()))
            .build()
            .map(|locker| locker.settings().policy)
    }
    let (ms, ticket_ttl) = (Duration::from_millis, Duration::from_secs(3));
    let fair = Ok(BusyPolicy::Wait {
        timeout: ms(500),
        mode: WaitMode::Fair { ticket_ttl },
    });

    assert_eq!(
        policy(|l| l.fair(ticket_ttl).wait(ms(500))),
        fair,
        "wait keeps fairness"
    );
    assert_eq!(policy(|l| l.wait(ms(500)).fair(ticket_ttl)), fair);
    assert_eq!(
        policy(|l| l.fair(ticket_ttl).wait_polling(ms(500))),
        Err(ConfigError::FairPolling)
    );
    assert_eq!(
        policy(|l| l.fair(ticket_ttl).reject()),
        Err(ConfigError::FairWithoutWaiting)
    );
    assert_eq!(
        policy(|l| l.fair(Duration::ZERO)),
        Err(ConfigError::TicketTtlOutOfRange(Duration::ZERO)),
        "a zero ticket TTL would ask the store every millisecond"
    );
}
