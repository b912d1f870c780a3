//! The conformance suite every backend passes (feature `conformance`).
//!
//! A backend's tests describe its store once — a [`Store`]: how to start a fresh one, and how
//! to connect a backend to it as another process would — and
//! [`conformance_suite!`](crate::conformance_suite) turns
//! every case into a named test, so a failure says which backend broke which rule:
//!
//! ```ignore
//! mod redis {
//!     tower_lock::conformance_suite!(RedisStore, leases, read_write, semaphore, wait_queue, outage);
//! }
//! ```
//!
//! The mutex cases always run; the others run for the capabilities named after the store:
//! `leases` (a lock nobody releases frees itself when its TTL runs out — every store but those
//! whose locks live in a database or etcd session, freed when the session ends), `read_write`
//! ([`SharedLocks`]: readers and writers take turns, and waiting writers keep their place in
//! line across processes), `semaphore` ([`Semaphores`]),
//! `shared_leases` (readers' and permit holders' leases run out on their own too: both shapes
//! and `leases`), `wait_queue`
//! ([`LockBackend::wait_queue`] offers one), `inspect` ([`Inspect`]: the operator's view and
//! release), `listing` (`Inspect`'s held names), `inspect_shapes` (`inspect` with both shapes)
//! and `outage` (the store can be made to stop answering: [`Outage`]). Each case is also a public function, to call on its own, on a
//! Tokio runtime of yours (with its paused clock for a store that keeps time there, as
//! [`Store::PAUSED_CLOCK`] says).
//!
//! The cases use short leases (a second) on real time, since a store's expiry
//! runs on its own clock, or on Tokio's paused clock for a store that keeps its time there
//! ([`Store::PAUSED_CLOCK`]: the memory store's cases never wait on the wall clock).

use std::future::Future;

use crate::backend::LockBackend;
#[cfg(doc)]
use crate::backend::{Inspect, Semaphores, SharedLocks};

mod cohort;
mod inspection;
mod mutex;
mod outage;
mod permits;
mod reader_runs;
mod readers_writers;
mod support;
mod ticket_rules;
mod wait_queue;

pub use cohort::*;
pub use inspection::*;
pub use mutex::*;
pub use outage::*;
pub use permits::*;
pub use reader_runs::*;
pub use readers_writers::*;
pub use support::Occupancy;
pub use ticket_rules::*;
pub use wait_queue::*;

/// A store under test: a fresh one per case, and backends on it.
pub trait Store: Send + Sync + Sized + 'static {
    /// The backend under test.
    type Backend: LockBackend + Clone;

    /// Starts a fresh, empty store (its own server, database or namespace).
    fn start() -> impl Future<Output = Self> + Send;

    /// A backend on this store as another process would have it (its own connections): locks
    /// taken through one exclude those taken through another.
    fn backend(&self) -> impl Future<Output = Self::Backend> + Send;

    /// Whether exclusive holds get fencing tokens (default `true`).
    fn fences(&self) -> bool {
        true
    }

    /// Whether a lock nobody extends or releases frees itself when its TTL runs out (default
    /// `true`); `false` for stores whose locks live as long as a session or a connection, and
    /// are freed when it ends. The same as naming the `leases` capability.
    fn leases_expire(&self) -> bool {
        true
    }

    /// Whether the operator sees a holder from its grant on (default `true`); `false` for
    /// stores whose holders record themselves at their first renewal, a third of the TTL
    /// after the grant (MySQL `NOWAIT` rows).
    fn holders_seen_from_grant(&self) -> bool {
        true
    }

    /// Whether the store records who freed a lease in an operator's release, so that its
    /// holder can log who did ([`LockBackend::released_by`]) rather than only that the lease
    /// is gone (default `false`; memory and Redis record it).
    fn records_releases(&self) -> bool {
        false
    }

    /// Whether the cases run on Tokio's paused clock (default `false`): one thread, time
    /// standing still while any task can run and jumping to the next timer when none can, so
    /// a case's timed assertions hold however loaded the machine is. Only for a store that
    /// keeps time on Tokio's clock and waits on nothing outside the runtime (the memory
    /// store): while a case waits for a server's answer the clock would jump ahead, and every
    /// store timeout fire at once — and a server's leases expire on its own clock anyway.
    const PAUSED_CLOCK: bool = false;
}

/// Runs one case on the runtime its store asks for ([`Store::PAUSED_CLOCK`]), failing it
/// after 60 s (of that clock). What [`conformance_suite!`](crate::conformance_suite) calls.
#[doc(hidden)]
pub fn run_case<S: Store>(case: impl Future<Output = ()>) {
    let mut runtime = match S::PAUSED_CLOCK {
        true => tokio::runtime::Builder::new_current_thread(),
        false => {
            let mut runtime = tokio::runtime::Builder::new_multi_thread();
            runtime.worker_threads(2);
            runtime
        }
    };
    let runtime = runtime
        .enable_all()
        .start_paused(S::PAUSED_CLOCK)
        .build()
        .expect("a Tokio runtime for the case");
    let limit = std::time::Duration::from_secs(60);
    runtime
        .block_on(async { tokio::time::timeout(limit, case).await })
        .expect("the case finished within 60 s");
}

/// A store that can be made to stop answering, as a frozen or partitioned server does.
pub trait Outage: Store {
    /// From now on, the store receives commands but answers none.
    fn stop_answering(&self);

    /// The store answers again (and processes what it received meanwhile).
    fn answer_again(&self);
}

/// Turns every conformance case into a named `#[test]` for the store type `$store` (run by
/// [`run_case`] on the runtime the store asks for: [`Store::PAUSED_CLOCK`]): the
/// mutex cases, and those of each capability named after it (`leases`, `read_write`,
/// `semaphore`, `shared_leases`, `wait_queue`, `inspect`, `listing`, `inspect_shapes`,
/// `outage`). See the [module](crate::conformance)
/// docs.
#[macro_export]
macro_rules! conformance_suite {
    ($store:ty $(, $capability:ident)* $(,)?) => {
        $crate::__conformance_cases!(mutex, $store);
        $($crate::__conformance_cases!($capability, $store);)*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    (mutex, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            exclusion_holds_under_64_contenders_in_two_processes,
            without_a_shared_key_contenders_overlap,
            extending_keeps_a_lease_past_its_ttl,
            fences_increase_strictly_per_key,
            a_dropped_acquire_gives_back_what_it_took,
            several_keys_are_taken_all_or_none,
            overlapping_sets_of_keys_never_deadlock,
            a_waiter_wakes_soon_after_the_release,
            exclusion_holds_with_locks_handed_on_in_three_processes,
            fences_increase_across_local_and_store_handoffs,
            a_handed_lease_ends_when_the_runs_lease_ends,
            a_run_of_local_holds_keeps_renewing_its_lease,
        );
    };
    (leases, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            release_and_extend_act_only_for_the_owner,
            a_lease_expires_after_its_ttl,
            a_lost_announcement_costs_at_most_the_holders_lease,
            a_lapsed_holder_does_not_hold_back_its_processes_waiters,
        );
    };
    (read_write, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            readers_share_and_exclude_writers_and_mutexes,
            a_multi_key_hold_excludes_readers,
            a_waiting_writer_bars_new_readers_only_while_it_waits,
            readers_and_writers_take_turns,
            a_reader_that_gives_up_waiting_leaves_nothing_behind,
            a_writer_that_asks_once_leaves_nothing_behind,
            a_writer_that_asks_once_passes_no_waiting_reader,
            a_writer_that_gives_up_waiting_leaves_nothing_behind,
            waiting_writers_in_two_processes_take_turns,
            writers_alone_hand_over_like_a_mutex,
            fair_writers_alone_hand_over_like_fair_mutexes,
            a_writer_is_woken_by_a_release_in_its_own_process,
            a_polling_writer_is_woken_by_a_release_in_its_own_process,
            readers_of_a_process_share_one_store_hold,
            a_reader_comes_in_after_a_waiting_writer_of_any_process,
            readers_sharing_a_hold_keep_renewing_it,
            readers_and_writers_exclude_each_other_in_three_processes,
            waiting_writers_keep_their_place_while_another_processs_runs_end,
        );
    };
    (semaphore, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            a_semaphore_admits_at_most_its_permits,
            a_semaphore_across_two_processes_admits_exactly_its_permits,
            a_permit_waiter_is_woken_by_any_holders_release,
            a_permit_waiter_is_woken_by_a_release_in_its_own_process,
        );
    };
    (shared_leases, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            a_readers_lease_expires_on_its_own,
            a_permit_expires_on_its_own,
        );
    };
    (wait_queue, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            fair_waiters_are_served_in_arrival_order,
            notified_processes_take_turns,
            notified_handoffs_never_let_two_in,
            a_queued_waiter_that_gives_up_leaves_the_line,
            another_process_waits_at_most_one_run_of_local_holds,
            a_queue_follows_the_ticket_rules,
        );
    };
    (inspect, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            an_operator_sees_the_holder_from_another_process,
            an_operator_counts_the_waiters_in_its_own_processs_line,
            an_operators_release_fences_out_the_holder_it_frees,
            a_freed_holder_is_told_who_released_it,
        );
    };
    (listing, $store:ty) => {
        $crate::__conformance_tests!($store; held_keys_come_in_bounded_pages);
    };
    (inspect_shapes, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            an_operator_sees_every_reader_and_permit,
        );
    };
    (outage, $store:ty) => {
        $crate::__conformance_tests!(
            $store;
            a_silent_store_is_an_error_within_the_store_timeout,
            every_task_in_line_hears_a_silent_store_fail,
            the_same_line_on_a_held_lock_hears_busy,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($store:ty; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run_case::<$store>(async {
                    let store = <$store as $crate::conformance::Store>::start().await;
                    $crate::conformance::$case(&store).await;
                });
            }
        )*
    };
}
