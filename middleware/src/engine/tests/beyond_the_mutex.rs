//! Read-write locks, semaphores and several keys through the locker, in paused time.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::locker;
use crate::test_support::Inside;
use crate::{Hold, LockError, Locker, MemoryBackend};

fn waiting() -> Locker<MemoryBackend> {
    locker(MemoryBackend::new(), |locker| {
        locker.wait(Duration::from_secs(60))
    })
}

/// Takes `k` as `hold` with `locker` and stays inside for `work`.
fn visit(
    locker: &Locker<MemoryBackend>,
    inside: &Arc<Inside>,
    hold: Hold,
    work: Duration,
) -> tokio::task::JoinHandle<Result<(), LockError>> {
    let (locker, inside) = (locker.clone(), inside.clone());
    tokio::spawn(async move {
        let held = match hold {
            Hold::Read => locker.read("k").await?,
            Hold::Write => locker.write("k").await?,
            _ => locker.lock("k").await?,
        };
        inside.visit(held.hold(), work).await;
        held.release().await
    })
}

#[tokio::test(start_paused = true)]
async fn readers_share_the_key_and_writers_hold_it_alone() {
    let (locker, inside) = (waiting(), Arc::new(Inside::default()));

    let visits: Vec<_> = (0..20)
        .map(|i| {
            let hold = if i % 5 == 0 { Hold::Write } else { Hold::Read };
            visit(&locker, &inside, hold, Duration::from_millis(100))
        })
        .collect();
    for visit in visits {
        visit.await.unwrap().unwrap();
    }

    assert!(inside.most_readers() > 1, "readers overlapped");
    assert_eq!(
        inside.overlaps(),
        0,
        "no writer shared the key with anybody"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let (locker, inside) = (waiting(), Arc::new(Inside::default()));
    let work = Duration::from_millis(100);
    let mut readers = vec![visit(&locker, &inside, Hold::Read, work)];
    tokio::time::sleep(Duration::from_millis(10)).await;
    let writer = visit(&locker, &inside, Hold::Write, work);
    let started = Instant::now();
    // New readers keep arriving, each overlapping the last: without the writer's intent they
    // would hold the key forever.
    while !writer.is_finished() && started.elapsed() < Duration::from_secs(30) {
        readers.push(visit(&locker, &inside, Hold::Read, work));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    writer.await.unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "got in after {:?}",
        started.elapsed()
    );
    for reader in readers {
        reader.await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_permit_outliving_its_ttl_is_renewed_and_keeps_the_others_out() {
    let ttl = Duration::from_millis(300);
    let locker = locker(MemoryBackend::new(), |locker| locker.ttl(ttl).reject());
    let one = NonZeroU32::MIN;
    let held = locker.permit("k", one).await.unwrap();

    for _ in 0..6 {
        tokio::time::sleep(ttl / 2).await;
        let refused = locker.permit("k", one).await;
        assert!(
            matches!(refused, Err(LockError::Busy { .. })),
            "{refused:?}"
        );
    }

    assert!(held.is_held(), "renewed, not lost");
    held.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn transfers_over_overlapping_keys_exclude_each_other_without_deadlock() {
    let (locker, inside) = (waiting(), Arc::new(Inside::default()));
    let transfers: Vec<_> = (0..20)
        .map(|i| {
            let (locker, inside) = (locker.clone(), inside.clone());
            let pair = if i % 2 == 0 { ["a", "b"] } else { ["b", "a"] };
            tokio::spawn(async move {
                let held = locker.lock_all(pair).await?;
                assert_eq!(held.keys().collect::<Vec<_>>(), ["a", "b"], "sorted");
                assert!(held.fence_of("a").is_some() && held.fence_of("b").is_some());
                inside.visit(held.hold(), Duration::from_millis(10)).await;
                held.release().await
            })
        })
        .collect();

    for transfer in transfers {
        transfer.await.unwrap().unwrap();
    }
    assert_eq!(inside.overlaps(), 0);
}
