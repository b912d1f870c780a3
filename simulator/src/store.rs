//! The simulated store: one [`MemoryBackend`] every simulated process shares, reached through
//! each process's [`Link`], with leases of either kind — a TTL the store counts down (Redis,
//! the SQL lease rows), or a session's: held for as long as the holder's session lives, and
//! freed when it expires (etcd, ZooKeeper). A store with TTLs may replicate, and fail over to
//! a replica that had not caught up ([`Replication`]).

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tower_lock::MemoryBackend;
use tower_lock::backend::waiting::WaitingRoom;
use tower_lock::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, OwnerToken, QueuedAttempt,
    Semaphores, SharedLocks, TokenLease, WaitQueue,
};

use crate::caller::ASKING;
use crate::fairness::Waiters;
use crate::link::Link;
use crate::replication::Replication;

/// How the store keeps a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Leases {
    /// For the TTL asked, renewed by each extend.
    Ttl,
    /// For as long as the holder's session lives; the session expires `timeout` after its
    /// process stops keeping it alive (killed, or paused that long).
    Session { timeout: Duration },
}

/// A lease a session lease store holds for as long as this, in place of a TTL.
const SESSION_HOLD: Duration = Duration::from_secs(24 * 60 * 60);

impl Leases {
    fn asked(self, mut request: LockRequest) -> LockRequest {
        if let Self::Session { .. } = self {
            request.ttl = SESSION_HOLD;
        }
        request
    }

    fn ttl(self, ttl: Duration) -> Duration {
        match self {
            Self::Ttl => ttl,
            Self::Session { .. } => SESSION_HOLD,
        }
    }
}

/// One simulated process's backend: the shared store, through its link.
#[derive(Clone, Debug)]
pub(crate) struct SimBackend {
    store: MemoryBackend,
    link: Arc<Link>,
    leases: Leases,
    /// The store's replica, if it has one: the backend waits for it after a grant or a renewal.
    replication: Option<Replication>,
    /// The leases the store granted the process's session, for its expiry to free.
    session_leases: Arc<Mutex<Vec<(String, TokenLease)>>>,
    /// Where the process's waiters wait: the store's announcements reach it through the
    /// simulation's delivery, late or not at all.
    room: Arc<WaitingRoom>,
    /// The process's id, and where the store notes its fair waiters' tickets.
    pid: u64,
    waiters: Waiters,
}

impl SimBackend {
    pub(crate) fn new(
        (store, replication): (MemoryBackend, Option<Replication>),
        link: Arc<Link>,
        leases: Leases,
        (pid, waiters): (u64, Waiters),
    ) -> Self {
        Self {
            store,
            link,
            leases,
            replication,
            session_leases: Arc::default(),
            room: WaitingRoom::in_process(),
            pid,
            waiters,
        }
    }

    /// Where the process's waiters wait.
    pub(crate) fn room(&self) -> &Arc<WaitingRoom> {
        &self.room
    }

    /// The process freezes for `pause` (a GC pause): its link holds everything back, and its
    /// session, if it is not kept alive for the session timeout, expires.
    pub(crate) fn freeze(&self, pause: Duration) {
        let since = self.link.pause_until(tokio::time::Instant::now() + pause);
        self.expire_if_silent(since);
    }

    /// The process is killed: its link carries nothing from now on, and its session expires.
    pub(crate) fn kill(&self) {
        let since = self.link.kill();
        self.expire_if_silent(since);
    }

    /// Expires the process's session one session timeout after `since`, if it has been
    /// silent since then.
    fn expire_if_silent(&self, since: tokio::time::Instant) {
        let Leases::Session { timeout } = self.leases else {
            return;
        };
        let backend = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(since + timeout).await;
            if backend.link.silent_since(since) {
                backend.session_expired().await;
            }
        });
    }

    /// The store frees what the process's session held: its session expired.
    async fn session_expired(&self) {
        let leases = std::mem::take(&mut *lock(&self.session_leases));
        for (name, lease) in leases {
            let _ = self.store.release(&name, &lease).await;
        }
    }

    /// Sends `apply` (on the store, with the name it is given) through the link, noting what it
    /// granted; `ticket`: the fair waiter's ticket it is about, if any. Where the store
    /// replicates, a grant or a renewal is answered once the replica acknowledged it; a grant
    /// it did not (the store failed over first) is given back, and the call fails, as the
    /// Redis backend's `replica_acks` does.
    async fn call<T, F, Fut>(
        &self,
        (what, name, ticket): (&'static str, &str, Option<OwnerToken>),
        apply: F,
    ) -> Result<T, BackendError>
    where
        T: Granting + std::fmt::Debug + Send + 'static,
        F: FnOnce(MemoryBackend, String) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BackendError>> + Send + 'static,
    {
        let (store, names) = (self.store.clone(), name.to_owned());
        let session_leases = self.session_leases.clone();
        let session = matches!(self.leases, Leases::Session { .. });
        let replication = self.replication.clone();
        let acknowledges = (replication.as_ref()).is_some_and(|replica| replica.acknowledges(what));
        self.link
            .call((what, name, ticket), async move {
                let failovers = match &replication {
                    Some(replica) if !replica.answers() => {
                        return Err(BackendError::new(
                            "the store is failing over: no master answers",
                        ));
                    }
                    Some(replica) => replica.failovers(),
                    None => 0,
                };
                let answer = apply(store.clone(), names.clone()).await;
                let to_acknowledge = answer.as_ref().is_ok_and(Granting::to_acknowledge);
                if let Some(replica) = replication.filter(|_| acknowledges && to_acknowledge)
                    && !replica.wait_for_replica(&names, failovers).await
                {
                    let mut given_back = Vec::new();
                    if let Ok(taken) = &answer {
                        taken.grants(&names, &mut given_back);
                    }
                    for (name, lease) in given_back {
                        let _ = store.release(&name, &lease).await;
                    }
                    return Err(BackendError::new(
                        "the store's replica did not acknowledge the call in time",
                    ));
                }
                if let (true, Ok(answer)) = (session, &answer) {
                    answer.grants(&names, &mut lock(&session_leases));
                }
                answer
            })
            .await
    }
}

impl SimBackend {
    /// `apply` through the link, as [`call`](Self::call); where leases are a session's, tried
    /// again in the background until the store answers, as etcd's and ZooKeeper's backends
    /// keep deleting what a release or an abandonment left: a deletion lost on the way would
    /// otherwise hold the lock for as long as the session lives.
    async fn until_answered<T, F, Fut>(
        &self,
        (what, name, ticket): (&'static str, &str, Option<OwnerToken>),
        apply: F,
    ) -> Result<T, BackendError>
    where
        T: Granting + std::fmt::Debug + Send + 'static,
        F: Fn(MemoryBackend, String) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, BackendError>> + Send + 'static,
    {
        let Leases::Session { timeout } = self.leases else {
            return self.call((what, name, ticket), apply).await;
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        let (backend, name) = (self.clone(), name.to_owned());
        tokio::spawn(async move {
            let mut answer = Some(answer);
            loop {
                let attempt = backend.call((what, &name, ticket), apply.clone());
                let outcome = tokio::time::timeout(timeout / 4, attempt).await;
                let done = matches!(outcome, Ok(Ok(_)));
                let outcome = outcome.unwrap_or_else(|_| {
                    Err(BackendError::new(
                        "the simulated store did not answer in time",
                    ))
                });
                if let Some(answer) = answer.take() {
                    let _ = answer.send(outcome);
                }
                if done {
                    return;
                }
                tokio::time::sleep(timeout / 8).await;
            }
        });
        answered
            .await
            .unwrap_or_else(|_| Err(BackendError::new("the simulated store went away")))
    }
}

/// An answer that may grant leases.
trait Granting {
    fn grants(&self, _name: &str, _into: &mut Vec<(String, TokenLease)>) {}

    /// Whether the store's replica must acknowledge it: it took or renewed a lease.
    fn to_acknowledge(&self) -> bool {
        false
    }
}

/// An extend's answer: whether it renewed the lease.
impl Granting for bool {
    fn to_acknowledge(&self) -> bool {
        *self
    }
}

impl Granting for () {}

impl Granting for Attempt<Granted<TokenLease>> {
    fn to_acknowledge(&self) -> bool {
        matches!(self, Attempt::Acquired(_))
    }

    fn grants(&self, name: &str, into: &mut Vec<(String, TokenLease)>) {
        if let Attempt::Acquired(granted) = self {
            into.push((name.to_owned(), granted.lease));
        }
    }
}

/// A ticket may be handed the lock later, under the caller's token: noted either way.
impl Granting for QueuedAttempt<TokenLease> {
    fn to_acknowledge(&self) -> bool {
        matches!(self, QueuedAttempt::Acquired(_))
    }

    fn grants(&self, name: &str, into: &mut Vec<(String, TokenLease)>) {
        let lease = match self {
            QueuedAttempt::Acquired(granted) => granted.lease,
            QueuedAttempt::Queued { handover, .. } => *handover,
        };
        into.push((name.to_owned(), lease));
    }
}

/// Several names at once: `names` joined by `\n`.
impl Granting for Attempt<Vec<Granted<TokenLease>>> {
    fn to_acknowledge(&self) -> bool {
        matches!(self, Attempt::Acquired(_))
    }

    fn grants(&self, names: &str, into: &mut Vec<(String, TokenLease)>) {
        if let Attempt::Acquired(all) = self {
            for (name, granted) in names.split('\n').zip(all) {
                into.push((name.to_owned(), granted.lease));
            }
        }
    }
}

impl LockBackend for SimBackend {
    type Lease = TokenLease;

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let request = self.leases.asked(request);
        self.call(("acquire", name, None), move |store, name| async move {
            store.acquire(&name, request).await
        })
        .await
    }

    async fn extend(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let (lease, ttl) = (*lease, self.leases.ttl(ttl));
        self.call(("extend", name, None), move |store, name| async move {
            store.extend(&name, &lease, ttl).await
        })
        .await
    }

    async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
        let lease = *lease;
        self.until_answered(("release", name, None), move |store, name| async move {
            store.release(&name, &lease).await
        })
        .await
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        self.until_answered(("abandon", name, None), move |store, name| async move {
            store.abandon(&name, request).await
        })
        .await
    }

    async fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> Result<Attempt<Vec<Granted<TokenLease>>>, BackendError> {
        let request = self.leases.asked(request);
        self.call(
            ("acquire_many", &names.join("\n"), None),
            move |store, names| async move {
                let names: Vec<&str> = names.split('\n').collect();
                store.acquire_many(&names, request).await
            },
        )
        .await
    }

    fn store_kind(&self) -> &'static str {
        "simulated"
    }

    fn wait_queue(&self) -> Option<&dyn WaitQueue<TokenLease>> {
        Some(self)
    }

    fn max_ttl(&self) -> Option<Duration> {
        match self.leases {
            Leases::Ttl => None,
            Leases::Session { timeout } => Some(timeout),
        }
    }
}

impl WaitQueue<TokenLease> for SimBackend {
    fn room(&self) -> &Arc<WaitingRoom> {
        &self.room
    }

    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<TokenLease>, BackendError>> {
        let request = self.leases.asked(request);
        // A caller's ask (not one the engine makes in a task of its own) counts as a fair
        // waiter's, whose wait ends when the caller's does.
        let waiter = ASKING.try_with(|asking| (self.pid, asking.deadline)).ok();
        let waiters = self.waiters.clone();
        Box::pin(self.call(
            ("acquire_queued", name, Some(request.token)),
            move |store, name| async move {
                let queue = store.wait_queue().expect("the memory store queues");
                let answer = queue.acquire_queued(&name, request, ticket_ttl).await;
                if let (Some(waiter), Ok(_)) = (waiter, &answer) {
                    waiters.asked((&name, request.token), waiter);
                }
                answer
            },
        ))
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        let waiters = self.waiters.clone();
        Box::pin(
            self.until_answered(("leave_queue", name, Some(token)), move |store, name| {
                let waiters = waiters.clone();
                async move {
                    let queue = store.wait_queue().expect("the memory store queues");
                    queue.leave_queue(&name, token).await?;
                    waiters.left(&name, token);
                    Ok(())
                }
            }),
        )
    }
}

impl SharedLocks for SimBackend {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let request = self.leases.asked(request);
        self.call(
            ("acquire_read", name, None),
            move |store, name| async move { store.acquire_read(&name, request).await },
        )
        .await
    }

    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let request = self.leases.asked(request);
        self.call(
            ("acquire_write", name, None),
            move |store, name| async move { store.acquire_write(&name, request).await },
        )
        .await
    }
}

impl Semaphores for SimBackend {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let request = self.leases.asked(request);
        self.call(
            ("acquire_permit", name, None),
            move |store, name| async move { store.acquire_permit(&name, request, permits).await },
        )
        .await
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
