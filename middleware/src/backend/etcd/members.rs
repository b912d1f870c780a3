//! Which member the backend talks to: one at a time (pinned), moving to the next when the
//! pinned one cannot be reached or has no leader — as etcd's own Go client does.
//!
//! A client balancing over every member keeps sending a share of its requests to a member that
//! died until it reconnects, and each of those fails; a pinned client fails once and moves on.
//! A request that certainly never reached a member that could apply it (its connection was
//! refused, or the member answered that it has no leader) is sent again to the next member;
//! any other failure is the caller's, as the request may have been applied.
//!
//! The members also remember the highest raft term any answer carried, so that a request left
//! unanswered across a leader change can be told apart (`leader_change.rs`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use etcd_client::{Client, ConnectOptions, Error, ResponseHeader};
use tokio::sync::watch;

use crate::backend::BackendError;

/// gRPC's `UNAVAILABLE`, the code of both a refused connection and a member without a leader.
const UNAVAILABLE: i32 = 14;

/// A client per member, and the one in use.
pub(super) struct Members {
    clients: Vec<Client>,
    pinned: AtomicUsize,
    /// The highest raft term an answer carried.
    term: AtomicU64,
    /// The latest term in which the pinned member was seen following a leader
    /// (`leader_change.rs`).
    pub(super) leader_term: watch::Sender<u64>,
    /// Whether a caller is asking the pinned member about its leader.
    pub(super) probing: AtomicBool,
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members")
            .field("members", &self.clients.len())
            .field("pinned", &self.pinned)
            .field("term", &self.term)
            .finish()
    }
}

impl Members {
    /// A client per endpoint (connections are opened when first used).
    pub(super) async fn connect<E: AsRef<str>>(
        endpoints: &[E],
        options: &ConnectOptions,
    ) -> Result<Self, BackendError> {
        let mut clients = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let client = Client::connect([endpoint.as_ref()], Some(options.clone()))
                .await
                .map_err(BackendError::new)?;
            clients.push(client);
        }
        if clients.is_empty() {
            return Err(BackendError::new("no etcd endpoint was given"));
        }
        Ok(Self {
            clients,
            pinned: AtomicUsize::new(0),
            term: AtomicU64::new(0),
            leader_term: watch::Sender::new(0),
            probing: AtomicBool::new(false),
        })
    }

    /// The pinned member's client, and its index (to report it with [`failed`](Self::failed)).
    pub(super) fn pinned(&self) -> (usize, &Client) {
        let index = self.pinned.load(Ordering::Relaxed) % self.clients.len();
        (index, &self.clients[index])
    }

    /// Member `index` failed: the next one is pinned (unless another caller moved on already).
    pub(super) fn failed(&self, index: usize) {
        let next = (index + 1) % self.clients.len();
        self.pinned
            .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed)
            .ok();
    }

    /// The highest raft term an answer carried so far (0 before the first).
    pub(super) fn term(&self) -> u64 {
        self.term.load(Ordering::Relaxed)
    }

    /// An answer carried raft term `term`.
    pub(super) fn saw_term(&self, term: u64) {
        self.term.fetch_max(term, Ordering::Relaxed);
    }

    /// Runs `call` on the pinned member; moves on when it is unreachable, sending the call
    /// again to the next member when the first certainly never applied it (at most once per
    /// member).
    pub(super) async fn call<T, F, Fut>(&self, call: F) -> Result<T, BackendError>
    where
        T: Headed,
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut tries = self.clients.len();
        loop {
            let (index, client) = self.pinned();
            let error = match call(client.clone()).await {
                Ok(answer) => {
                    if let Some(header) = answer.header() {
                        self.saw_term(header.raft_term());
                    }
                    return Ok(answer);
                }
                Err(error) => error,
            };
            if !unreachable(&error) {
                return Err(BackendError::new(error));
            }
            self.failed(index);
            tries -= 1;
            if tries == 0 || !unsent(&error) {
                return Err(BackendError::new(error));
            }
        }
    }
}

/// The member cannot serve: it is unreachable, or has no leader.
pub(super) fn unreachable(error: &Error) -> bool {
    match error {
        Error::GRpcStatus(status) => i32::from(status.code()) == UNAVAILABLE,
        Error::TransportError(_) | Error::IoError(_) => true,
        _ => false,
    }
}

/// The request certainly never reached a member that could apply it.
fn unsent(error: &Error) -> bool {
    match error {
        Error::GRpcStatus(status) => {
            let message = status.message();
            message.contains("connect error") || message.contains("no leader")
        }
        _ => false,
    }
}

/// An answer that carries etcd's response header (its raft term).
pub(super) trait Headed {
    fn header(&self) -> Option<&ResponseHeader>;
}

macro_rules! headed {
    ($($answer:ty),* $(,)?) => {
        $(impl Headed for $answer {
            fn header(&self) -> Option<&ResponseHeader> {
                <$answer>::header(self)
            }
        })*
    };
}

headed!(
    etcd_client::TxnResponse,
    etcd_client::GetResponse,
    etcd_client::DeleteResponse,
    etcd_client::LeaseGrantResponse,
    etcd_client::LeaseRevokeResponse,
    etcd_client::LeaseTimeToLiveResponse,
    etcd_client::StatusResponse,
);
