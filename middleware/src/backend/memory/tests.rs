//! What the memory backend does beyond the conformance suite (which it passes, below): exact
//! remaining leases, one fencing counter, sweeping, and handing a lock to a queued ticket.

use super::*;
use crate::backend::FencingToken;

const TTL: Duration = Duration::from_secs(10);

crate::conformance_suite!(
    MemoryStore,
    leases,
    read_write,
    semaphore,
    shared_leases,
    wait_queue,
    inspect,
    listing,
    inspect_shapes
);

/// The conformance suite's store: clones of one backend are the "processes".
#[derive(Default)]
struct MemoryStore(MemoryBackend);

impl crate::conformance::Store for MemoryStore {
    type Backend = MemoryBackend;
    const PAUSED_CLOCK: bool = true;

    async fn start() -> Self {
        Self::default()
    }

    async fn backend(&self) -> MemoryBackend {
        self.0.clone()
    }

    fn records_releases(&self) -> bool {
        true
    }
}

fn request(token: OwnerToken) -> LockRequest {
    LockRequest::new(token, TTL)
}

async fn fence_of(store: &MemoryBackend, name: &str, token: OwnerToken) -> FencingToken {
    match store.acquire(name, request(token)).await.unwrap() {
        Attempt::Acquired(Granted { fence, .. }) => fence.expect("memory locks are fenced"),
        Attempt::Busy { .. } => panic!("expected {name} to be free, it was busy"),
    }
}

async fn queue(store: &MemoryBackend, token: OwnerToken, ticket_ttl: Duration) {
    let answer = store
        .acquire_queued("k", request(token), ticket_ttl)
        .await
        .unwrap();
    assert!(matches!(answer, QueuedAttempt::Queued { .. }), "{answer:?}");
}

fn holder_of(store: &MemoryBackend) -> Option<OwnerToken> {
    let state = store.lock_state();
    state.keys.get("k")?.holder_token(Instant::now())
}

fn exclusive(token: OwnerToken) -> TokenLease {
    TokenLease::new(token, Hold::Mutex)
}

#[tokio::test(start_paused = true)]
async fn a_held_key_is_busy_with_the_holders_remaining_ttl() {
    let store = MemoryBackend::new();
    fence_of(&store, "k", OwnerToken::new()).await;
    tokio::time::advance(Duration::from_secs(4)).await;

    let answer = store
        .acquire("k", request(OwnerToken::new()))
        .await
        .unwrap();

    assert!(
        matches!(answer, Attempt::Busy { holder_ttl: Some(left) } if left == Duration::from_secs(6)),
        "{answer:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn fences_of_different_keys_come_from_one_counter() {
    let store = MemoryBackend::new();
    let a = fence_of(&store, "a", OwnerToken::new()).await;
    let b = fence_of(&store, "b", OwnerToken::new()).await;
    tokio::time::advance(TTL).await;
    let a_again = fence_of(&store, "a", OwnerToken::new()).await;

    assert!(a < b && b < a_again, "{a} {b} {a_again}");
}

#[tokio::test(start_paused = true)]
async fn released_keys_are_swept_and_fences_still_increase() {
    let store = MemoryBackend::new();
    let mut last = FencingToken::new(0);
    for i in 0..MIN_SWEEP_LEN {
        let token = OwnerToken::new();
        last = fence_of(&store, &format!("k{i}"), token).await;
        store
            .release(&format!("k{i}"), &exclusive(token))
            .await
            .unwrap();
    }
    assert_eq!(store.tracked_keys(), MIN_SWEEP_LEN);

    let again = fence_of(&store, "k0", OwnerToken::new()).await;

    assert!(again > last, "a swept key's next fence is still larger");
    assert_eq!(store.tracked_keys(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_release_hands_the_lock_to_a_ticket_that_outlives_its_lease() {
    let store = MemoryBackend::new();
    let (holder, long, short) = (OwnerToken::new(), OwnerToken::new(), OwnerToken::new());
    let held = fence_of(&store, "k", holder).await;
    queue(&store, long, TTL * 2).await;
    queue(&store, short, TTL / 2).await;

    store.release("k", &exclusive(holder)).await.unwrap();
    assert_eq!(holder_of(&store), Some(long), "handed over");
    let again = store
        .acquire_queued("k", request(long), TTL * 2)
        .await
        .unwrap();
    let QueuedAttempt::Acquired(Granted {
        fence: Some(again), ..
    }) = again
    else {
        panic!("the ticket holds the lock: {again:?}");
    };
    assert!(
        again.get() > held.get() + 1,
        "asking again gives a fresh fence"
    );

    store.release("k", &exclusive(long)).await.unwrap();
    assert_eq!(holder_of(&store), None, "a short ticket is only announced");
    let taken = store
        .acquire_queued("k", request(short), TTL / 2)
        .await
        .unwrap();
    assert!(matches!(taken, QueuedAttempt::Acquired(_)), "{taken:?}");
}

#[tokio::test(start_paused = true)]
async fn a_ticket_leaving_with_a_handed_lock_passes_it_on() {
    let store = MemoryBackend::new();
    let (holder, first, second) = (OwnerToken::new(), OwnerToken::new(), OwnerToken::new());
    fence_of(&store, "k", holder).await;
    queue(&store, first, TTL * 2).await;
    queue(&store, second, TTL * 2).await;
    store.release("k", &exclusive(holder)).await.unwrap();

    store.leave_queue("k", first).await.unwrap();

    assert_eq!(holder_of(&store), Some(second));
}
