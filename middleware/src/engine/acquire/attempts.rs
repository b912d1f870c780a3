//! The attempts of one acquire on one name: asking once, and waiting between attempts.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};

use super::cleanup::{Abandon, QueuePlace};
use super::{HearsBusy, NotObtained, Obtained};
use crate::backend::Ask;
use crate::backend::waiting::Place;
use crate::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, Patience, QueuedAttempt,
};
use crate::engine::names::LockNames;
use crate::engine::settings::Settings;
use crate::engine::telemetry::{StoreOp, Tally};

/// How an attempt asks the store.
#[derive(Clone, Copy, Debug)]
pub(super) enum How {
    /// Take the lock if it is free.
    Plain,
    /// Take it if it is free and this ticket is first in its queue; else hold a place in the
    /// queue for this long ([`WaitQueue::acquire_queued`](crate::backend::WaitQueue)).
    Queued(Duration),
}

/// What one attempt answered.
pub(super) enum Answer<L> {
    Acquired(Obtained<L>),
    Busy { holder_ttl: Option<Duration> },
}

/// The attempts of one acquire on one name.
pub(super) struct Attempts<'a, B: LockBackend> {
    pub(super) backend: &'a Arc<B>,
    /// The lock's names: `name` alone.
    pub(super) names: &'a LockNames,
    pub(super) name: &'a str,
    pub(super) request: LockRequest,
    pub(super) ask: Ask<B>,
    pub(super) settings: &'a Settings,
    pub(super) tally: &'a Tally,
    /// The locker's line that waits for these attempts, told of every busy answer.
    pub(super) hears: Option<&'a dyn HearsBusy>,
}

impl<B: LockBackend> Attempts<'_, B> {
    /// One attempt, asked `how`.
    pub(super) async fn once(&self, how: How) -> Result<Answer<B::Lease>, NotObtained> {
        self.ask(how, self.request).await
    }

    /// One attempt that leaves nothing behind when busy (no intent, no mark): a look.
    pub(super) async fn look(&self) -> Result<Answer<B::Lease>, NotObtained> {
        self.ask(How::Plain, self.request.patience(Patience::Once))
            .await
    }

    /// The wait is over: one last look, for an accurate `Retry-After`, by a caller that will
    /// not listen for the release.
    pub(super) async fn once_more_busy(&self) -> Result<Obtained<B::Lease>, NotObtained> {
        match self.look().await? {
            Answer::Acquired(obtained) => Ok(obtained),
            Answer::Busy { holder_ttl, .. } => Err(NotObtained::Busy { holder_ttl }),
        }
    }

    async fn ask(&self, how: How, request: LockRequest) -> Result<Answer<B::Lease>, NotObtained> {
        let (name, store_timeout) = (self.name, self.settings.store_timeout);
        let sent = self.tally.attempted();
        // Armed until the answer is in: a lost answer may have taken the lock.
        let abandon = Abandon::new(self.backend, self.names, request, store_timeout);
        let meters = self.tally.meters();
        let answer = match (how, self.backend.wait_queue()) {
            (How::Queued(ticket_ttl), Some(queue)) => {
                let queued = queue.acquire_queued(name, request, ticket_ttl);
                (meters
                    .store_call(StoreOp::Acquire, store_timeout, queued)
                    .await)
                    .map(|answer| answer.map(|answer| Answer::queued(answer, sent)))
            }
            _ => {
                let attempt = self.ask.attempt(self.backend, name, request);
                (meters
                    .store_call(StoreOp::Acquire, store_timeout, attempt)
                    .await)
                    .map(|answer| answer.map(|answer| Answer::plain(answer, sent)))
            }
        };
        match answer {
            Ok(Ok(answer)) => {
                abandon.disarm();
                if let Answer::Busy { .. } = answer {
                    self.tally.busy();
                    if let Some(hears) = self.hears {
                        hears.said_busy();
                    }
                }
                Ok(answer)
            }
            Ok(Err(error)) => {
                tracing::warn!(lock = name, %error, "acquire failed");
                Err(NotObtained::Store(error))
            }
            Err(_) => {
                tracing::warn!(lock = name, timeout = ?store_timeout, "acquire timed out");
                Err(NotObtained::Store(BackendError::timed_out(store_timeout)))
            }
        }
    }

    /// Attempts until acquired or `deadline`. Between attempts it sleeps until `place` hears a
    /// release announced (armed before each attempt, so none is missed) or the holder's lease
    /// runs out — or, without live announcements, for a backoff delay. `refresh` caps each
    /// sleep (tickets and intents must be renewed).
    pub(super) async fn wait(
        &self,
        place: Option<&Place>,
        deadline: Instant,
        refresh: Option<Duration>,
        how: How,
    ) -> Result<Obtained<B::Lease>, NotObtained> {
        let mut attempt: u32 = 0;
        loop {
            let mut announced = pin!(place.map(|place| place.released().notified()));
            if let Some(announced) = announced.as_mut().as_pin_mut() {
                announced.enable();
            }
            let holder_ttl = match self.once(how).await? {
                Answer::Acquired(obtained) => return Ok(obtained),
                Answer::Busy { holder_ttl } => holder_ttl,
            };
            stall_point!("busy");
            if let (How::Queued(_), Some(place)) = (how, place) {
                place.enqueued();
                // A handover heard by now may have been made before the store answered busy,
                // and have lapsed in between. Asked again at once, the store says whether the
                // lock is this ticket's — with a fresh lease if it is. Not past the deadline,
                // though: the caller is answered within one store call of it (its ticket,
                // withdrawn, passes a lock handed to it on).
                if place.handed().is_some() && Instant::now() < deadline {
                    continue;
                }
            }
            // Only a waiter that listens has its busy answers marked for the release to be
            // announced: one that polls asks again after its backoff, or when its own process
            // releases the lock (the only wake-up its place in the room gets).
            let listens = self.request.patience == Patience::Listens;
            let live = listens && place.is_some_and(Place::announcements_live);
            let Some(delay) = self.delay(attempt, live, holder_ttl, deadline) else {
                return Err(NotObtained::Busy { holder_ttl });
            };
            let delay = refresh.map_or(delay, |refresh| delay.min(refresh));
            // Without live announcements the delay is a backoff, but a release in this
            // process may still hand the lock over and wake the waiter early.
            match announced.as_pin_mut() {
                Some(announced) => drop(timeout(delay, announced).await),
                None => sleep(delay).await,
            }
            // A release that handed the lock to this ticket is taken by asking again at once:
            // the store says whether the lock is still the ticket's, with a fresh lease if it
            // is. Taken on the announcement alone, a handover heard late — made before the last
            // busy answer, lapsed since, the lock another's — would be held by two.
            if let Some(place) = place {
                place.handed();
            }
            attempt = attempt.saturating_add(1);
        }
    }

    /// How long to sleep before the next attempt, or `None` when the wait is over: until the
    /// announcement or the holder's lease runs out when announcements are `live`, else a
    /// backoff delay.
    fn delay(
        &self,
        attempt: u32,
        live: bool,
        holder_ttl: Option<Duration>,
        deadline: Instant,
    ) -> Option<Duration> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if live {
            (!remaining.is_zero()).then(|| holder_ttl.unwrap_or(remaining).min(remaining))
        } else {
            self.settings
                .backoff
                .next_delay(attempt, fastrand::f64(), holder_ttl, remaining)
        }
    }

    /// [`wait`](Self::wait) with queued attempts, renewing the ticket every third of
    /// `ticket_ttl` or of the lock's TTL, whichever is shorter, and withdrawing it if the wait
    /// ends without the lock (or is dropped). A lock the store hands the ticket is held for
    /// the waiter for its TTL: asked within a third of it, the waiter takes it even when the
    /// announcement never comes.
    pub(super) async fn wait_queued(
        &self,
        place: Option<&Place>,
        deadline: Instant,
        ticket_ttl: Duration,
    ) -> Result<Obtained<B::Lease>, NotObtained> {
        let place_in_queue = QueuePlace::new(
            self.backend,
            self.name,
            self.request.token,
            self.settings.store_timeout,
        );
        let refresh = match mutant!("fair-refresh-by-ticket") {
            true => Some(ticket_ttl / 3),
            false => Some(ticket_ttl.min(self.settings.ttl) / 3),
        };
        let acquired = self
            .wait(place, deadline, refresh, How::Queued(ticket_ttl))
            .await;
        if acquired.is_ok() {
            place_in_queue.used();
        }
        acquired
    }
}

impl<L> Answer<L> {
    fn plain(answer: Attempt<Granted<L>>, sent: Instant) -> Self {
        match answer {
            Attempt::Acquired(grant) => Self::Acquired(Obtained {
                grants: vec![grant],
                sent,
            }),
            Attempt::Busy { holder_ttl } => Self::Busy { holder_ttl },
        }
    }

    fn queued(answer: QueuedAttempt<L>, sent: Instant) -> Self {
        match answer {
            QueuedAttempt::Acquired(grant) => Self::Acquired(Obtained {
                grants: vec![grant],
                sent,
            }),
            // A release may hand the lock to the ticket: the waiter hears it, and asks again.
            QueuedAttempt::Queued { holder_ttl, .. } => Self::Busy { holder_ttl },
        }
    }
}
