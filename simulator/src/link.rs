//! One simulated process's link to the store: the one path every contract call takes. The
//! seed decides each call's fate — answered after a delay, refused before the store saw it,
//! applied with its answer lost, applied and never answered, or answered late — and a paused
//! process's calls wait out the pause, a killed one's never end.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until};
use tower_lock::backend::{BackendError, OwnerToken};

/// How often each fault befalls a call, and how long calls take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Faults {
    /// Refused before the store saw it (a connection reset).
    pub(crate) refused: f64,
    /// Applied, its answer lost.
    pub(crate) lost: f64,
    /// Applied, never answered (the caller's store timeout ends the wait).
    pub(crate) hung: f64,
    /// Answered after `slow` (around the store timeout).
    pub(crate) slow: f64,
    pub(crate) slow_delay: Duration,
    /// The longest an ordinary call takes each way.
    pub(crate) max_delay: Duration,
}

/// What befalls one call.
#[derive(Clone, Copy, Debug)]
enum Fate {
    Answered { there: Duration, back: Duration },
    Refused,
    AnswerLost { there: Duration },
    Hung { there: Duration },
}

/// How many of each fault the link has dealt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Dealt {
    pub(crate) refused: u64,
    pub(crate) lost: u64,
    pub(crate) hung: u64,
    pub(crate) slow: u64,
}

impl Dealt {
    pub(crate) fn total(&self) -> u64 {
        self.refused + self.lost + self.hung + self.slow
    }
}

#[derive(Debug, Default)]
struct State {
    paused_until: Option<Instant>,
    /// When the pause it is in, if any, began.
    paused_since: Option<Instant>,
    /// Every pause: from when until when.
    pauses: Vec<(Instant, Instant)>,
    killed: bool,
    dealt: Dealt,
    /// Every call: when it was sent (since the link was made), what it asked, its fate.
    calls: Vec<(Duration, String)>,
    /// When faults struck the process, from when until when they could tell: the whole
    /// process (`None`: a pause, its death), or a call about a fair waiter's ticket.
    struck: Vec<(Option<OwnerToken>, Instant, Instant)>,
}

/// How long after a fault on a call it may still tell: past every store timeout and slow
/// answer a plan draws.
const FAULT_REACH: Duration = Duration::from_millis(500);

/// A process's link; see the module's docs.
#[derive(Debug)]
pub(crate) struct Link {
    rng: Mutex<fastrand::Rng>,
    faults: Faults,
    state: Mutex<State>,
    epoch: Instant,
    logs: bool,
}

impl Link {
    /// A link whose fates follow `seed`, keeping a log of its calls (timed from `epoch`) if
    /// it `logs`.
    pub(crate) fn new(seed: u64, faults: Faults, (epoch, logs): (Instant, bool)) -> Self {
        Self {
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            faults,
            state: Mutex::default(),
            epoch,
            logs,
        }
    }

    /// Sends `apply` to the store: it is applied in a task of its own once it arrives, whatever
    /// the caller does meanwhile (a request sent stays sent), and its answer comes back as the
    /// call's fate says. `ticket`: the fair waiter's ticket the call is about, if any.
    pub(crate) async fn call<T: std::fmt::Debug + Send + 'static>(
        &self,
        (what, name, ticket): (&'static str, &str, Option<OwnerToken>),
        apply: impl Future<Output = Result<T, BackendError>> + Send + 'static,
    ) -> Result<T, BackendError> {
        self.reachable().await;
        let fate = self.draw(ticket);
        self.note(|| format!("{what} {}: {fate:?}", name.replace('\n', "+")));
        let there = match fate {
            Fate::Refused => {
                sleep(self.faults.max_delay).await;
                self.reachable().await;
                return Err(BackendError::new("the simulated connection was reset"));
            }
            Fate::Answered { there, .. } | Fate::AnswerLost { there } | Fate::Hung { there } => {
                there
            }
        };
        let applied = tokio::spawn(async move {
            sleep(there).await;
            apply.await
        });
        let answer = applied
            .await
            .unwrap_or_else(|error| Err(BackendError::new(format!("the store failed: {error}"))));
        self.note(|| format!("{what} {} applied: {answer:?}", name.replace('\n', "+")));
        match fate {
            Fate::Answered { back, .. } => {
                sleep(back).await;
                self.reachable().await;
                answer
            }
            Fate::AnswerLost { .. } => {
                self.reachable().await;
                Err(BackendError::new("the simulated answer was lost"))
            }
            Fate::Hung { .. } | Fate::Refused => std::future::pending().await,
        }
    }

    /// Notes what happened now, if the link keeps a log.
    fn note(&self, what: impl FnOnce() -> String) {
        if self.logs {
            let at = Instant::now() - self.epoch;
            self.lock_state().calls.push((at, what()));
        }
    }

    /// Returns once the process runs: at once, or when its pause ends; never once it was
    /// killed.
    pub(crate) async fn reachable(&self) {
        loop {
            let (paused_until, killed) = {
                let state = self.lock_state();
                (state.paused_until, state.killed)
            };
            if killed {
                std::future::pending::<()>().await;
            }
            match paused_until {
                Some(until) if until > Instant::now() => sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Freezes the process until `until` (or the end of a pause it is in, if later): its calls
    /// and its work wait. When the pause it is in began.
    pub(crate) fn pause_until(&self, until: Instant) -> Instant {
        let now = Instant::now();
        let mut state = self.lock_state();
        let since = match state.paused_until {
            Some(paused) if paused > now => state.paused_since.unwrap_or(now),
            _ => now,
        };
        state.paused_since = Some(since);
        state.paused_until = state.paused_until.max(Some(until));
        state.struck.push((None, now, until));
        state.pauses.push((now, until));
        since
    }

    /// How long the process was paused between `from` and `until`, in all.
    pub(crate) fn paused_within(&self, from: Instant, until: Instant) -> Duration {
        let mut pauses = self.lock_state().pauses.clone();
        pauses.sort_unstable();
        let (mut paused, mut reached) = (Duration::ZERO, from);
        for (start, end) in pauses {
            let (start, end) = (start.max(reached), end.min(until));
            if end > start {
                paused += end - start;
                reached = end;
            }
        }
        paused
    }

    /// Ends the process: nothing it sends from now on arrives, nothing it was sent returns.
    /// When it fell silent: now, or when the pause it was in began.
    pub(crate) fn kill(&self) -> Instant {
        let now = Instant::now();
        let mut state = self.lock_state();
        state.killed = true;
        state
            .struck
            .push((None, now, now + Duration::from_secs(24 * 60 * 60)));
        match state.paused_until {
            Some(paused) if paused > now => state.paused_since.unwrap_or(now),
            _ => now,
        }
    }

    /// Whether the process has been silent (paused, or killed) since `since` without a break.
    pub(crate) fn silent_since(&self, since: Instant) -> bool {
        let now = Instant::now();
        let state = self.lock_state();
        let paused = (state.paused_until)
            .is_some_and(|until| until >= now && state.paused_since.is_some_and(|at| at <= since));
        state.killed || paused
    }

    /// Whether a fault struck the process, or a call about fair waiter `ticket`, between
    /// `from` and `until`.
    pub(crate) fn struck_between(&self, ticket: OwnerToken, from: Instant, until: Instant) -> bool {
        let state = self.lock_state();
        (state.struck.iter()).any(|(on, start, end)| {
            on.is_none_or(|on| on == ticket) && *start <= until && *end >= from
        })
    }

    pub(crate) fn dealt(&self) -> Dealt {
        self.lock_state().dealt
    }

    /// Every call sent so far: when, what, and its fate.
    pub(crate) fn calls(&self) -> Vec<(Duration, String)> {
        self.lock_state().calls.clone()
    }

    fn draw(&self, ticket: Option<OwnerToken>) -> Fate {
        let faults = self.faults;
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut delay = || Duration::from_micros(rng.u64(0..=faults.max_delay.as_micros() as u64));
        let (there, back) = (delay(), delay());
        let roll = rng.f64();
        let mut state = self.lock_state();
        let (before, now) = (state.dealt.total(), Instant::now());
        let fate = Self::fate(&mut state.dealt, faults, roll, (there, back));
        if let Some(ticket) = ticket
            && state.dealt.total() > before
        {
            state.struck.push((Some(ticket), now, now + FAULT_REACH));
        }
        fate
    }

    /// The fate `roll` draws, counted in `dealt`.
    fn fate(
        dealt: &mut Dealt,
        faults: Faults,
        roll: f64,
        (there, back): (Duration, Duration),
    ) -> Fate {
        let mut threshold = faults.refused;
        if roll < threshold {
            dealt.refused += 1;
            return Fate::Refused;
        }
        threshold += faults.lost;
        if roll < threshold {
            dealt.lost += 1;
            return Fate::AnswerLost { there };
        }
        threshold += faults.hung;
        if roll < threshold {
            dealt.hung += 1;
            return Fate::Hung { there };
        }
        threshold += faults.slow;
        if roll < threshold {
            dealt.slow += 1;
            return Fate::Answered {
                there,
                back: back + faults.slow_delay,
            };
        }
        Fate::Answered { there, back }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
