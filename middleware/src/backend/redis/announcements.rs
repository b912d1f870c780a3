//! Release announcements: one subscriber connection per backend, routed to its waiting room.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::{AsyncPushSender, ConnectionManager};
use redis::{Client, ProtocolVersion, PushInfo, PushKind, RedisError, Value};

use super::connecting::manager_config;
use super::keys::LockKey;
use crate::backend::waiting::{Announcement, Subscriptions, WaitingRoom};

/// How long a subscription command may take before the waiters poll instead.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Opens the subscriber connection (RESP3, so pushes arrive with the channel they belong to)
/// and the waiting room it feeds. The connection resubscribes by itself after a reconnect.
pub(super) async fn waiting_room(client: &Client) -> Result<Arc<WaitingRoom>, RedisError> {
    let (room_slot, deliver) = delivery();
    let subscriber = subscriber(client, deliver).await?;
    let room = WaitingRoom::with_subscriptions(PubSubSubscriber(Arc::new(Mutex::new(subscriber))));
    room_slot.set(Arc::downgrade(&room)).ok();
    Ok(room)
}

/// A subscriber connection to the server of `client` (RESP3), handing its pushes to `deliver`
/// and subscribing again by itself after a reconnect.
async fn subscriber(
    client: &Client,
    deliver: impl AsyncPushSender,
) -> Result<ConnectionManager, RedisError> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let resp3 = Client::open(info.set_redis_settings(settings))?;
    let config = manager_config()
        .set_push_sender(deliver)
        .set_automatic_resubscription();
    ConnectionManager::new_with_config(resp3, config).await
}

/// Opens a subscriber connection to the master the Sentinels of `master` name, and the waiting
/// room it feeds. When they name another master (the command connection followed a
/// failover), a new subscriber connection goes there and the room subscribes again.
#[cfg(feature = "redis-sentinel")]
pub(super) async fn sentinel_waiting_room(
    master: &super::sentinel::SentinelConnection,
) -> Result<Arc<WaitingRoom>, RedisError> {
    let mut named = master.named();
    let (room_slot, deliver) = delivery();
    let client = named.borrow_and_update().clone();
    let current = Arc::new(Mutex::new(subscriber(&client, deliver.clone()).await?));
    let room = WaitingRoom::with_subscriptions(PubSubSubscriber(Arc::clone(&current)));
    room_slot.set(Arc::downgrade(&room)).ok();
    let following = Arc::downgrade(&room);
    tokio::spawn(async move {
        while named.changed().await.is_ok() {
            let client = named.borrow_and_update().clone();
            let Ok(connection) = subscriber(&client, deliver.clone()).await else {
                continue;
            };
            *lock(&current) = connection;
            match following.upgrade() {
                Some(room) => room.subscribe_again(),
                None => return,
            }
        }
    });
    Ok(room)
}

/// Where a subscriber connection's pushes go, once the room it feeds exists.
type RoomSlot = Arc<OnceLock<Weak<WaitingRoom>>>;

/// The room's end of a subscriber connection: its slot, and what the connection calls with
/// each push.
fn delivery() -> (
    RoomSlot,
    impl Fn(PushInfo) -> Result<(), ()> + Clone + Send + Sync + 'static,
) {
    let room_slot = RoomSlot::default();
    let deliver = {
        let room_slot = Arc::clone(&room_slot);
        move |push: PushInfo| {
            if let Some(room) = room_slot.get().and_then(Weak::upgrade) {
                route(&room, push);
            }
            Ok(())
        }
    };
    (room_slot, deliver)
}

/// Opens a subscriber connection to the cluster of `nodes` (RESP3), subscribing with sharded
/// pub/sub (`SSUBSCRIBE`) on each lock's shard, and the waiting room it feeds. The connection
/// follows the cluster's topology and resubscribes after a reconnect or a slot's move; a
/// subscription the server drops (its slot migrated) is made again.
#[cfg(feature = "redis-cluster")]
pub(super) async fn cluster_waiting_room(
    nodes: Vec<redis::ConnectionInfo>,
) -> Result<Arc<WaitingRoom>, RedisError> {
    let (room_slot, deliver) = delivery();
    let client = super::connecting::cluster_client(nodes)
        .use_protocol(ProtocolVersion::RESP3)
        .push_sender(deliver)
        .build()?;
    let subscriber = client.get_async_connection().await?;
    let room = WaitingRoom::with_subscriptions(ShardSubscriber(subscriber));
    room_slot.set(Arc::downgrade(&room)).ok();
    Ok(room)
}

/// Routes one push from the subscriber connection to the waiters of its lock.
fn route(room: &WaitingRoom, push: PushInfo) {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let name = push.data.first().and_then(text);
    let name = name.as_deref().and_then(LockKey::name_of_channel);
    match (push.kind, name) {
        (PushKind::Message | PushKind::SMessage, Some(name)) => {
            let message = push.data.get(1).and_then(text);
            // Anything unreadable wakes everyone: they ask the store.
            let announcement = message.as_deref().and_then(Announcement::parse);
            room.announce(name, announcement.unwrap_or(Announcement::Free));
        }
        (PushKind::Subscribe | PushKind::SSubscribe, Some(name)) => {
            room.subscription_confirmed(name);
        }
        // The server drops a sharded subscription when its slot moves to another node (and
        // confirms one the room gave up): made again while the room still wants it.
        (PushKind::SUnsubscribe, Some(name)) => room.subscription_lost(name),
        (PushKind::Disconnection, _) => room.disconnected(),
        _ => {}
    }
}

/// Subscribes on a node: the one it connected to, or the master the Sentinels name now.
struct PubSubSubscriber(Arc<Mutex<ConnectionManager>>);

impl Subscriptions for PubSubSubscriber {
    fn subscribe(&mut self, name: &str) -> BoxFuture<'static, bool> {
        let (mut connection, channel) = (lock(&self.0).clone(), LockKey::channel(name).to_string());
        Box::pin(async move {
            let subscribed =
                tokio::time::timeout(SUBSCRIBE_TIMEOUT, connection.subscribe(&channel));
            matches!(subscribed.await, Ok(Ok(())))
        })
    }

    fn unsubscribe(&mut self, name: &str) -> BoxFuture<'static, ()> {
        let (mut connection, channel) = (lock(&self.0).clone(), LockKey::channel(name).to_string());
        Box::pin(async move {
            let unsubscribed =
                tokio::time::timeout(SUBSCRIBE_TIMEOUT, connection.unsubscribe(&channel));
            if !matches!(unsubscribed.await, Ok(Ok(()))) {
                tracing::debug!(channel, "unsubscribe failed; the next reconnect drops it");
            }
        })
    }
}

/// Subscribes on a cluster, with sharded pub/sub on each lock's shard.
#[cfg(feature = "redis-cluster")]
struct ShardSubscriber(redis::cluster_async::ClusterConnection);

#[cfg(feature = "redis-cluster")]
impl Subscriptions for ShardSubscriber {
    fn subscribe(&mut self, name: &str) -> BoxFuture<'static, bool> {
        let (mut connection, channel) = (self.0.clone(), LockKey::channel(name).to_string());
        Box::pin(async move {
            let subscribed =
                tokio::time::timeout(SUBSCRIBE_TIMEOUT, connection.ssubscribe(&channel));
            matches!(subscribed.await, Ok(Ok(())))
        })
    }

    fn unsubscribe(&mut self, name: &str) -> BoxFuture<'static, ()> {
        let (mut connection, channel) = (self.0.clone(), LockKey::channel(name).to_string());
        Box::pin(async move {
            let unsubscribed =
                tokio::time::timeout(SUBSCRIBE_TIMEOUT, connection.sunsubscribe(&channel));
            if !matches!(unsubscribed.await, Ok(Ok(()))) {
                tracing::debug!(channel, "unsubscribe failed; the next reconnect drops it");
            }
        })
    }
}

fn lock(connection: &Mutex<ConnectionManager>) -> MutexGuard<'_, ConnectionManager> {
    // One assignment changes it: a poisoned lock is still consistent.
    connection
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
