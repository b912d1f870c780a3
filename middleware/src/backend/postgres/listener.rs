//! Release announcements: one `LISTEN`ing connection per backend, routed to its waiting room
//! by lock name.
//!
//! Every lock of a table is announced on one channel (named after the table), with the lock's
//! name in the payload: `LISTEN` needs no command per lock, and a name of any length fits.
//! While the connection is down, waiters retry on timers; once it is back (sqlx reconnects and
//! listens again), the names they wait for are confirmed live again.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;

use crate::backend::BackendError;
use crate::backend::waiting::{Announcement, Subscriptions, WaitingRoom};

/// How long the listener waits before trying to reconnect after a failed attempt.
const RECONNECT_PAUSE: Duration = Duration::from_millis(250);

/// The channel a table's releases are announced on: `tower_lock_` and a hash of the table's
/// name (FNV-1a, the same in every process and build), short enough for any table name.
pub(super) fn channel(table: &str) -> String {
    let hash = table.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("tower_lock_{hash:016x}")
}

/// The payload of a release announcement on the table's channel: the announcement's message
/// (which has no line break) and the lock's name, on two lines.
pub(super) fn payload(name: &str, announcement: Announcement) -> String {
    format!("{}\n{name}", announcement.message())
}

/// Opens the listening connection (one of `pool`'s, for as long as the room lives), listens
/// on `channel`, and returns the waiting room it feeds.
pub(super) async fn waiting_room(
    pool: &PgPool,
    channel: &str,
) -> Result<Arc<WaitingRoom>, BackendError> {
    let mut listener = PgListener::connect_with(pool)
        .await
        .map_err(BackendError::new)?;
    listener.listen(channel).await.map_err(BackendError::new)?;
    let heard = Arc::new(Heard::default());
    let (closed, on_close) = watch::channel(());
    let room = WaitingRoom::with_subscriptions(ListenSubscriber {
        heard: Arc::clone(&heard),
        _closed: closed,
    });
    tokio::spawn(listen(listener, Arc::downgrade(&room), heard, on_close));
    Ok(room)
}

/// What the listener task shares with the room's subscriptions.
#[derive(Debug, Default)]
struct Heard {
    /// Lock names that have waiters in this process.
    names: Mutex<HashSet<String>>,
    /// Whether the connection is listening now.
    down: AtomicBool,
}

impl Heard {
    fn names(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The connection listens again: every name waited for is live again.
    fn listening(&self, room: &WaitingRoom) {
        self.down.store(false, Ordering::SeqCst);
        let names: Vec<String> = self.names().iter().cloned().collect();
        for name in names {
            room.subscription_confirmed(&name);
        }
    }
}

/// Receives announcements until the room is dropped (`on_close` then fires).
async fn listen(
    mut listener: PgListener,
    weak: Weak<WaitingRoom>,
    heard: Arc<Heard>,
    mut on_close: watch::Receiver<()>,
) {
    loop {
        let received = tokio::select! {
            received = listener.try_recv() => received,
            _ = on_close.changed() => return,
        };
        let Some(room) = weak.upgrade() else {
            return;
        };
        match received {
            Ok(Some(notification)) => route(&room, notification.payload()),
            // The connection dropped and sqlx listens again on a new one; what was announced
            // in between is lost: everybody asks the store.
            Ok(None) => {
                room.disconnected();
                heard.listening(&room);
            }
            Err(error) => {
                tracing::debug!(%error, "release announcements: the listening connection is down");
                heard.down.store(true, Ordering::SeqCst);
                room.disconnected();
                drop(room);
                tokio::time::sleep(RECONNECT_PAUSE).await;
                // Any command reconnects the listener, which listens again as it does.
                if sqlx::query("SELECT 1").execute(&mut listener).await.is_ok()
                    && let Some(room) = weak.upgrade()
                {
                    heard.listening(&room);
                }
            }
        }
    }
}

/// Routes one notification to the waiters of its lock; a payload that cannot be read is
/// ignored (its waiters fall back on their timers).
fn route(room: &WaitingRoom, payload: &str) {
    if let Some((message, name)) = payload.split_once('\n') {
        // An unreadable announcement wakes everyone: they ask the store.
        let announcement = Announcement::parse(message).unwrap_or(Announcement::Free);
        room.announce(name, announcement);
    }
}

/// The room's end of the listener: names come and go; the channel is always listened to.
struct ListenSubscriber {
    heard: Arc<Heard>,
    /// Dropped with the room's subscription task: the listener task then ends.
    _closed: watch::Sender<()>,
}

impl Subscriptions for ListenSubscriber {
    fn subscribe(&mut self, name: &str) -> BoxFuture<'static, bool> {
        self.heard.names().insert(name.to_owned());
        let live = !self.heard.down.load(Ordering::SeqCst);
        Box::pin(async move { live })
    }

    fn unsubscribe(&mut self, name: &str) -> BoxFuture<'static, ()> {
        self.heard.names().remove(name);
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tables_channel_is_fixed_and_fits_a_postgres_identifier() {
        assert_eq!(channel("tower_lock_leases"), channel("tower_lock_leases"));
        assert_ne!(channel("a.leases"), channel("b.leases"));
        assert!(channel(&"x".repeat(127)).len() < 64);
    }
}
