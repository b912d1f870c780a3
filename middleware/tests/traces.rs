//! The span of each acquisition, read back by a subscriber layer that keeps closed spans. A test
//! binary of its own: whether a span is wanted is cached per call site for the whole process,
//! and another test's thread, without this subscriber, could otherwise cache "never" for it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use tower_lock::{LockError, Locker, MemoryBackend};

/// A span's fields as recorded, by name.
#[derive(Clone, Debug, Default)]
struct Fields(Vec<(String, String)>);

impl Fields {
    fn get(&self, name: &str) -> Option<&str> {
        (self.0.iter().rev()).find_map(|(field, value)| (field == name).then_some(value.as_str()))
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

/// Keeps every closed span's name and fields.
#[derive(Clone, Default)]
struct Closed(Arc<Mutex<Vec<(&'static str, Fields)>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Closed {
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let mut fields = Fields::default();
        attributes.record(&mut fields);
        let span = context.span(id).expect("a new span");
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        let span = context.span(id).expect("a live span");
        if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, context: Context<'_, S>) {
        let span = context.span(&id).expect("a closing span");
        let fields = span
            .extensions()
            .get::<Fields>()
            .cloned()
            .unwrap_or_default();
        self.0.lock().unwrap().push((span.name(), fields));
    }
}

/// Runs `work` on a current-thread runtime on Tokio's paused clock, `layer` watching.
fn watched_on_the_paused_clock(
    layer: impl Layer<tracing_subscriber::Registry> + Send + Sync,
    work: impl std::future::Future<Output = ()>,
) {
    let subscriber = tracing_subscriber::registry().with(layer);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    subscriber::with_default(subscriber, || runtime.block_on(work));
}

/// Keeps every event's fields, its message among them.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Fields>>>);

impl<S: Subscriber> Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields);
    }
}

/// Its twin, `a_lock_taken_by_someone_else_is_reported_taken_at_the_next_renewal` (the
/// library's unit tests): a store that cannot tell says only that the lease is gone.
#[test]
fn a_holder_freed_by_an_operator_logs_the_operators_label() {
    let events = Events::default();
    watched_on_the_paused_clock(events.clone(), async {
        let store = MemoryBackend::new();
        let worker = Locker::builder(store.clone())
            .ttl(Duration::from_millis(300))
            .build()
            .unwrap();
        let operator = Locker::builder(store)
            .holder_label("ops-7")
            .build()
            .unwrap();
        let work = worker.with_lock("invoice:1", |_| async {
            operator.force_release("invoice:1").await.unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
        });
        let stopped = work.await;
        assert!(
            matches!(stopped, Err(LockError::LeaseLost { .. })),
            "{stopped:?}"
        );
        // Who freed it is asked in the background, once the holder was told.
        tokio::time::sleep(Duration::from_millis(1)).await;
    });
    let events = events.0.lock().unwrap().clone();
    let said = |message: &str| {
        (events.iter())
            .find(|fields| fields.get("message") == Some(message))
            .unwrap_or_else(|| panic!("no event {message:?} among {events:?}"))
    };
    let told = said("an operator released the lock");
    assert_eq!(told.get("released_by"), Some("ops-7"));
    assert_eq!(told.get("lock"), Some("lock:invoice:1"));
    let stopped = said("lock lost; stopping the work");
    assert_eq!(
        stopped.get("because"),
        Some("a renewal found the lease gone from the store")
    );
}

#[test]
fn each_acquisition_runs_in_a_span_naming_its_key_shape_wait_attempts_outcome_and_fence() {
    let closed = Closed::default();
    watched_on_the_paused_clock(closed.clone(), async {
        // Without handing on, the refused acquisition asks the store itself.
        let locker = Locker::builder(MemoryBackend::new())
            .wait(Duration::from_millis(300))
            .max_local_run(1)
            .build()
            .unwrap();
        let held = locker.lock("invoice:1").await.unwrap();
        let waited = locker.lock("invoice:1").await;
        assert!(matches!(waited, Err(LockError::Busy { .. })), "{waited:?}");
        drop(held);
    });
    let spans = closed.0.lock().unwrap().clone();
    let locks: Vec<&Fields> = (spans.iter())
        .filter(|(name, _)| *name == "lock")
        .map(|(_, fields)| fields)
        .collect();
    assert_eq!(locks.len(), 2, "{spans:?}");
    let (taken, refused) = (locks[0], locks[1]);
    for span in [taken, refused] {
        assert_eq!(span.get("key"), Some("invoice:1"));
        assert_eq!(span.get("shape"), Some("mutex"));
        assert_eq!(span.get("wait"), Some("notified"));
    }
    assert_eq!(taken.get("outcome"), Some("acquired"));
    assert_eq!(taken.get("attempts"), Some("1"));
    assert!(
        taken
            .get("fence")
            .is_some_and(|fence| fence.parse::<u64>().is_ok()),
        "{taken:?}"
    );
    assert_eq!(refused.get("outcome"), Some("wait_timed_out"));
    assert_eq!(refused.get("fence"), None);
    let attempts: u32 = refused.get("attempts").unwrap().parse().unwrap();
    assert!(
        attempts >= 2,
        "one look, then at least one more as the wait ends: {attempts}"
    );
}
