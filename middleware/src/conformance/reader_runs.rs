//! Readers of one locker sharing a store read hold: the readers waiting for one store answer
//! cost the store one hold, the last of them gives it back, every one of them renews it, a
//! reader never shares its way past a waiting writer, and readers and writers still exclude
//! each other.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Barrier;
use tokio::time::{sleep, timeout};

use super::Store;
use super::support::{LONG, Occupancy, SHORT, locker, until};
use crate::backend::SharedLocks;
use crate::testing::CountingBackend;
use crate::{LockError, Locker, LockerBuilder};

/// Sixteen readers of one process wait while another process writes; when the writer leaves
/// they all come in together, with at most a few store acquires between them (one asks for
/// all), and the store's hold lasts until the last of them leaves. The twin: with
/// `max_local_run(1)` (nothing shared), every reader asks the store for itself.
pub async fn readers_of_a_process_share_one_store_hold<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let shared = store_acquires_of_sixteen_waiting_readers(store, 8).await;
    assert!(
        shared <= 4,
        "sixteen readers of a process asked the store {shared} times"
    );
    // A reader that polls may have an attempt on its way as the writer leaves, which takes the
    // lock without asking again: 16 less a few.
    let alone = store_acquires_of_sixteen_waiting_readers(store, 1).await;
    assert!(
        alone >= 12,
        "with nothing shared, sixteen readers asked the store only {alone} times (the count works)"
    );
}

/// How many store acquires sixteen readers of a locker with `max_run` make between a writer
/// of another process leaving and all of them holding the lock together; checks that the
/// store's hold outlives every reader but the last.
async fn store_acquires_of_sixteen_waiting_readers<S: Store>(store: &S, max_run: u32) -> u64
where
    S::Backend: SharedLocks,
{
    let counted = CountingBackend::new(store.backend().await);
    let readers = locker(counted.clone(), |builder| {
        builder.wait(LONG).ttl(LONG).max_local_run(max_run)
    });
    let writers = locker(store.backend().await, |builder| {
        builder.wait(LONG).ttl(LONG)
    });
    let writer = writers.write("k").await.expect("free");
    let together = Arc::new(Barrier::new(16));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (readers, together) = (readers.clone(), together.clone());
        tasks.push(tokio::spawn(async move {
            let held = readers.read("k").await?;
            together.wait().await;
            Ok::<_, LockError>(held)
        }));
    }
    let before = settled_acquires(&counted).await;
    writer.release().await.expect("released");
    let mut held = Vec::new();
    for task in tasks {
        let waited = timeout(LONG / 3, task).await;
        let reader = waited.expect("every reader comes in, all at once");
        held.push(reader.expect("a reader panicked").expect("read"));
    }
    let acquires = counted.counts().acquires - before;
    let last = held.pop().expect("sixteen readers");
    for reader in held {
        reader.release().await.expect("released");
    }
    let outsider = locker(store.backend().await, |builder| builder.reject().ttl(LONG));
    let barred = outsider.write("k").await;
    assert!(
        matches!(barred, Err(LockError::Busy { .. })),
        "a writer got in while a reader still held the lock: {barred:?}"
    );
    last.release().await.expect("released");
    let free = outsider.write("k").await;
    assert!(free.is_ok(), "the last reader gave the lock back: {free:?}");
    acquires
}

/// The acquires `counted` has seen once the waiting readers stopped asking: no count change
/// for a while (an attempt still on its way when the writer leaves takes the lock without
/// asking again), or 2 s at most (readers that poll never stop).
async fn settled_acquires<B: SharedLocks>(counted: &CountingBackend<B>) -> u64 {
    const QUIET: Duration = Duration::from_millis(250);
    let mut seen = counted.counts().acquires;
    for _ in 0..8 {
        sleep(QUIET).await;
        let now = counted.counts().acquires;
        if now == seen && now > 0 {
            break;
        }
        seen = now;
    }
    seen
}

/// A reader does not come in beside the readers of its process while a writer waits — of its
/// own process or of another: it comes in after the writer.
pub async fn a_reader_comes_in_after_a_waiting_writer_of_any_process<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let settings = |builder: LockerBuilder<_>| builder.wait(LONG).ttl(LONG);
    let readers = locker(CountingBackend::new(store.backend().await), settings);
    let order = reader_after_a_writer(&readers, readers.clone()).await;
    assert_eq!(
        order,
        ["writer", "reader"],
        "a writer of the readers' process"
    );
    let other = locker(CountingBackend::new(store.backend().await), settings);
    let order = reader_after_a_writer(&readers, other).await;
    assert_eq!(order, ["writer", "reader"], "a writer of another process");
}

/// A reader of `readers` holds the key; `writers` asks to write it, then — once the writer
/// waits with its intent in the store — another reader of `readers` asks to read it, and must
/// still wait when the first leaves. In which order the writer and the second reader came in.
async fn reader_after_a_writer<B: SharedLocks>(
    readers: &Locker<CountingBackend<B>>,
    writers: Locker<CountingBackend<B>>,
) -> Vec<&'static str> {
    let first = readers.read("k").await.expect("free");
    let counted = writers.backend().clone();
    let answered = counted.acquires_answered();
    let order = Arc::new(Mutex::new(Vec::new()));
    let writing = order.clone();
    let writer = tokio::spawn(async move {
        let held = writers.write("k").await?;
        writing.lock().unwrap().push("writer");
        sleep(Duration::from_millis(20)).await;
        held.release().await
    });
    // A writer's look, then the attempt whose busy answer leaves its intent.
    until("the writer waits with its intent in the store", || {
        counted.acquires_answered() >= answered + 2
    })
    .await;
    let (reader, reading) = (readers.clone(), order.clone());
    let reader = tokio::spawn(async move {
        let held = reader.read("k").await?;
        reading.lock().unwrap().push("reader");
        held.release().await
    });
    sleep(Duration::from_millis(100)).await;
    assert!(
        !reader.is_finished(),
        "a reader came in beside its process's reader while a writer waited"
    );
    first.release().await.expect("released");
    writer.await.expect("the writer finished").expect("wrote");
    reader.await.expect("the reader finished").expect("read");
    order.lock().unwrap().clone()
}

/// Four readers of one process come in together with one store hold, and hold it for more than
/// twice its TTL, each leaving at its own time: every one renews it (each still holds it when
/// it leaves), and it is given back only when the last of them leaves.
pub async fn readers_sharing_a_hold_keep_renewing_it<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let readers = locker(store.backend().await, |builder| {
        builder.wait(LONG).ttl(SHORT)
    });
    let writers = locker(store.backend().await, |builder| {
        builder.wait(LONG).ttl(LONG)
    });
    let writer = writers.write("k").await.expect("free");
    let mut tasks = Vec::new();
    for reader in 0..4u32 {
        let readers = readers.clone();
        tasks.push(tokio::spawn(async move {
            let held = readers.read("k").await?;
            sleep(SHORT * 2 + SHORT / 4 * reader).await;
            assert!(held.is_held(), "reader {reader} lost the shared lease");
            Ok::<_, LockError>(held)
        }));
    }
    sleep(Duration::from_millis(100)).await;
    writer.release().await.expect("released");
    let outsider = locker(store.backend().await, |builder| builder.reject().ttl(LONG));
    let mut held = Vec::new();
    for task in tasks {
        let reader = task.await.expect("a reader panicked");
        held.push(reader.expect("every reader comes in"));
    }
    let last = held.pop().expect("four readers");
    for reader in held {
        reader
            .release()
            .await
            .expect("each reader still held it when it left");
    }
    let barred = outsider.write("k").await;
    assert!(
        matches!(barred, Err(LockError::Busy { .. })),
        "a writer got in while a reader still held the lock: {barred:?}"
    );
    last.release().await.expect("the last reader still held it");
    let free = outsider.write("k").await;
    assert!(free.is_ok(), "the last reader gave the lock back: {free:?}");
}

/// Three processes of 32 tasks each read a key (nine times in ten) and write it, sharing read
/// holds within each process: never a writer beside anybody. The same tasks without the lock
/// are seen overlapping (the probe works).
pub async fn readers_and_writers_exclude_each_other_in_three_processes<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let mut lockers = Vec::new();
    for _ in 0..3 {
        let backend = store.backend().await;
        lockers.push(locker(backend, |builder| builder.wait(LONG).ttl(LONG)));
    }
    let inside = Arc::new(Inside::default());
    let probe = Arc::new(Occupancy::default());
    let mut tasks = Vec::new();
    for task in 0..96 {
        let (locker, inside, probe) = (lockers[task % 3].clone(), inside.clone(), probe.clone());
        tasks.push(tokio::spawn(async move {
            probe.visit(Duration::from_micros(300)).await;
            for round in 0..3 {
                let writes = (task + round) % 10 == 0;
                let held = match writes {
                    true => locker.write("k").await?,
                    false => locker.read("k").await?,
                };
                inside.visit(writes, Duration::from_micros(300)).await;
                held.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        let done = task.await.expect("a task panicked");
        done.expect("every task gets the lock within the wait");
    }
    let overlaps = inside.overlaps.load(SeqCst);
    assert_eq!(overlaps, 0, "a writer held the key beside somebody else");
    assert!(
        probe.most() > 1,
        "the probe saw no overlap without the lock"
    );
}

/// Who is inside a read-write critical section, and how often a writer was seen beside
/// anybody (whoever came second sees the other).
#[derive(Debug, Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    overlaps: AtomicUsize,
}

impl Inside {
    async fn visit(&self, writes: bool, work: Duration) {
        let (mine, theirs) = match writes {
            true => (&self.writers, &self.readers),
            false => (&self.readers, &self.writers),
        };
        let with_me = mine.fetch_add(1, SeqCst) + 1;
        if theirs.load(SeqCst) > 0 || (writes && with_me > 1) {
            self.overlaps.fetch_add(1, SeqCst);
        }
        sleep(work).await;
        mine.fetch_sub(1, SeqCst);
    }
}
