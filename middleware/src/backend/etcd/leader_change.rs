//! Requests lost with a leader, sent again once the cluster has another.
//!
//! A member forwards every write to the leader. When the leader dies, a follower goes on
//! forwarding to it until its election timeout tells it otherwise, and etcd drops what it
//! forwarded: the request is never answered, and would hold its caller until the engine's store
//! timeout even though a new leader answers within milliseconds of being elected. So a request
//! left unanswered for [`SUSPECT_AFTER`] makes the backend ask its member, every
//! [`PROBE_EVERY`], which term the cluster is in; once the member follows a leader of a term
//! later than any answer had shown when the request went out, the request is sent again.
//!
//! The first copy may not be lost after all (the dead leader may have passed it on before it
//! died, and the new leader then applies it): only requests that are safe to apply twice go
//! this way — a put that lands only if the key is not there yet and reads it otherwise, deletes,
//! reads.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::{Client, Error};
use tokio::time::{sleep, timeout};

use super::members::{Headed, Members};
use crate::backend::BackendError;

/// How long a request goes unanswered before the backend asks whether the leader changed:
/// longer than a write takes on a healthy cluster (milliseconds), far shorter than an election.
const SUSPECT_AFTER: Duration = Duration::from_millis(50);

/// How often the backend asks while requests wait (one question for all of them), and how long
/// it waits for each answer.
const PROBE_EVERY: Duration = Duration::from_millis(50);

/// An answer, and whether the request was sent again to get it (its first copy may have been
/// applied as well).
pub(super) struct Answered<T> {
    pub(super) answer: T,
    pub(super) resent: bool,
}

impl Members {
    /// Runs `call` as [`call`](Members::call) does, and sends it again whenever the cluster has
    /// elected a new leader while it went unanswered. `call` must be safe to apply twice.
    pub(super) async fn call_idempotent<T, F, Fut>(
        &self,
        call: F,
    ) -> Result<Answered<T>, BackendError>
    where
        T: Headed,
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut resent = false;
        loop {
            let sent_in = self.term();
            let mut answered = pin!(self.call(&call));
            tokio::select! {
                answer = &mut answered => {
                    return answer.map(|answer| Answered { answer, resent });
                }
                () = self.leader_changed_since(sent_in) => {
                    tracing::debug!(term = self.term(), "etcd: a new leader; sending again");
                    resent = true;
                }
            }
        }
    }

    /// Returns once the pinned member follows a leader of a term after `term`, asking it from
    /// [`SUSPECT_AFTER`] on. One caller at a time asks, for all of them.
    async fn leader_changed_since(&self, term: u64) {
        sleep(SUSPECT_AFTER).await;
        let mut led = self.leader_term.subscribe();
        loop {
            if *led.borrow_and_update() > term {
                return;
            }
            match Probing::start(&self.probing) {
                Some(_probing) => {
                    self.probe().await;
                    sleep(PROBE_EVERY).await;
                }
                None => drop(timeout(PROBE_EVERY * 2, led.changed()).await),
            }
        }
    }

    /// Asks the pinned member which term it is in and whether it follows a leader.
    async fn probe(&self) {
        let (_, client) = self.pinned();
        let mut maintenance = client.maintenance_client();
        if let Ok(Ok(status)) = timeout(PROBE_EVERY, maintenance.status()).await {
            let term = status.raft_term();
            if status.leader() != 0 {
                self.saw_term(term);
                self.leader_term.send_if_modified(|led| {
                    let later = term > *led;
                    *led = (*led).max(term);
                    later
                });
            }
        }
    }
}

/// The one caller asking the member, until it stops (also when its request is answered
/// meanwhile and it is dropped).
struct Probing<'a>(&'a AtomicBool);

impl<'a> Probing<'a> {
    fn start(probing: &'a AtomicBool) -> Option<Self> {
        (!probing.swap(true, Ordering::AcqRel)).then_some(Self(probing))
    }
}

impl Drop for Probing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
