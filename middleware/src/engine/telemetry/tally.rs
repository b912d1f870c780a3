//! One acquisition as it is reported: its span, its attempts, its wait, and its answer.

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::time::Instant;
use tracing::Span;
use tracing::field::{Empty, display};

use super::{Meters, Outcome};
use crate::backend::FencingToken;
use crate::engine::BusyPolicy;

/// One acquisition's report: created when a lock is asked for, answered once. Its attempts
/// and its wait are counted by the code that makes them; dropped unanswered (the caller went
/// away), it counts as cancelled. A waiting acquisition is among the waiters until then.
#[derive(Debug)]
pub(crate) struct Tally {
    meters: Meters,
    span: Span,
    started: Instant,
    attempts: AtomicU32,
    /// Whether a busy answer starts a wait (the policy waits), and when one did.
    waits: bool,
    wait_began: OnceLock<Instant>,
    answered: bool,
}

impl Tally {
    /// The report of an acquisition of `keys`, recorded with `meters`, under `policy`.
    pub(crate) fn new(meters: Meters, keys: &impl fmt::Display, policy: BusyPolicy) -> Self {
        let span = tracing::debug_span!(
            "lock",
            key = %keys,
            shape = meters.shape(),
            wait = policy.label(),
            attempts = Empty,
            outcome = Empty,
            fence = Empty,
        );
        Self {
            meters,
            span,
            started: Instant::now(),
            attempts: AtomicU32::new(0),
            waits: !policy.timeout().is_zero(),
            wait_began: OnceLock::new(),
            answered: false,
        }
    }

    pub(crate) fn meters(&self) -> &Meters {
        &self.meters
    }

    /// The span the acquisition runs in.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// One more attempt is sent to the store now: when (the first one, when the acquisition
    /// began — a clock read saved; a lease counted from then ends no later).
    pub(crate) fn attempted(&self) -> Instant {
        match self.attempts.fetch_add(1, Ordering::Relaxed) {
            0 => self.started,
            _ => Instant::now(),
        }
    }

    /// An attempt found the lock busy: a waiting acquisition starts waiting.
    pub(crate) fn busy(&self) {
        if self.waits {
            self.waiting();
        }
    }

    /// The acquisition waits from now on (at the latest), without having asked: it lines up
    /// behind a waiter of its process.
    pub(crate) fn waiting(&self) {
        if self.wait_began.get().is_none() && self.wait_began.set(Instant::now()).is_ok() {
            self.meters.waiters(1.0);
        }
    }

    /// The acquisition ended as `outcome`, with `fence` when acquired: when.
    pub(crate) fn answer(mut self, outcome: Outcome, fence: Option<FencingToken>) -> Instant {
        self.answered = true;
        self.report(outcome, fence)
    }

    fn report(&self, outcome: Outcome, fence: Option<FencingToken>) -> Instant {
        let now = Instant::now();
        let waited = (self.wait_began.get()).map(|began| now.saturating_duration_since(*began));
        let took = now.saturating_duration_since(self.started);
        self.meters.answered(outcome, took, waited);
        let span = &self.span;
        if !span.is_disabled() {
            span.record("attempts", self.attempts.load(Ordering::Relaxed));
            span.record("outcome", outcome.as_str());
            if let Some(fence) = fence {
                span.record("fence", display(fence));
            }
        }
        now
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if !self.answered {
            self.report(Outcome::Cancelled, None);
        }
        if self.wait_began.get().is_some() {
            self.meters.waiters(-1.0);
        }
    }
}
