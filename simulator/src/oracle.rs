//! The oracle: the simulated store's own record of who held what, and when, built from every
//! change of its holders (`MemoryBackend::on_change`). What each holder believed (its recorded
//! holds, `History::beliefs`) is checked against it: a holder may believe it holds a lock only
//! while the store holds it for the holder's process, for the store loses no lease its holder
//! was told it has (a failover, which may forget leases, forgets no grant or renewal the
//! replica did not acknowledge before its caller was answered). The history checker's verdict,
//! reached from the holders' records alone, is checked against it too.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tower_lock::MemoryBackend;
use tower_lock::backend::{FencingToken, OwnerToken};
use tower_lock::testing::history::Belief;

/// The store's record of who held each lock name, and when.
#[derive(Clone, Debug)]
pub(crate) struct Oracle(Arc<Mutex<Record>>);

#[derive(Debug)]
struct Record {
    epoch: Instant,
    /// By lease: its holder's label, and its owner token.
    by_lease: Spans<(String, OwnerToken)>,
    /// The fences the store issued, by lock name and owner token.
    fences: HashMap<(String, OwnerToken), Vec<u64>>,
}

/// For each lock name and holder `H`, the spans the store held the name for it.
#[derive(Debug)]
struct Spans<H> {
    /// By lock name, the spans still open: since when, and until when its lease runs now.
    open: HashMap<String, BTreeMap<H, (Instant, Instant)>>,
    /// Spans ended, in nanoseconds since the epoch.
    held: BTreeMap<(String, H), Vec<(u128, u128)>>,
}

impl<H> Default for Spans<H> {
    fn default() -> Self {
        Self {
            open: HashMap::new(),
            held: BTreeMap::new(),
        }
    }
}

impl Oracle {
    /// Keeps the record of `store`'s holders, on the clock that starts at `epoch`.
    pub(crate) fn watch(store: &MemoryBackend, epoch: Instant) -> Self {
        let oracle = Self(Arc::new(Mutex::new(Record {
            epoch,
            by_lease: Spans::default(),
            fences: HashMap::new(),
        })));
        let record = oracle.0.clone();
        store.on_change(move |name, leases| lock(&record).changed(name, leases));
        oracle
    }

    /// Every belief the record does not cover, described; `ended`: when the run ended, for a
    /// belief held to the end. A belief under a fence must be covered by the lease the store
    /// issued that fence to; one without (a reader's, a permit's), by any of its process's.
    pub(crate) fn uncovered(&self, beliefs: &[Belief], ended: u128) -> Vec<String> {
        let mut record = lock(&self.0);
        record.close_all();
        let by_process = record.by_process();
        // By lock name and the store's fence: the leases it was issued to (more than one
        // where a failover forgot the first, and the fencing counter with it).
        let mut fenced: HashMap<(&str, u64), Vec<OwnerToken>> = HashMap::new();
        for ((name, token), fences) in &record.fences {
            for fence in fences {
                (fenced.entry((name.as_str(), *fence)).or_default()).push(*token);
            }
        }
        let mut found = Vec::new();
        for belief in beliefs {
            let label = format!("p{}", belief.pid);
            let under_fence: Vec<(u128, u128)>;
            let spans = match belief.fence.map(store_fence) {
                Some(fence) => {
                    under_fence = (fenced.get(&(belief.name.as_str(), fence)).into_iter())
                        .flatten()
                        .filter_map(|&token| {
                            let lease = (belief.name.clone(), (label.clone(), token));
                            record.by_lease.held.get(&lease)
                        })
                        .flatten()
                        .copied()
                        .collect();
                    &under_fence[..]
                }
                None => (by_process.get(&(belief.name.as_str(), label.as_str())))
                    .map_or(&[][..], Vec::as_slice),
            };
            let until = belief.until.unwrap_or(ended);
            if !covers(spans, belief.from, until) {
                found.push(format!(
                    "p{}'s hold {} believed it held {} from {:.3} ms to {:.3} ms (fence {:?}), but \
                     the store held it for that hold's lease {}",
                    belief.pid,
                    belief.hold,
                    belief.name,
                    ms(belief.from),
                    ms(until),
                    belief.fence,
                    describe(spans, (belief.from, until))
                ));
            }
        }
        found
    }

    /// When each lease's holder first held its lock (a belief under a fence the store issued
    /// to the lease), by lock name and owner token, in nanoseconds since the epoch.
    /// A fence a failover issued again (it forgot the first lease, and the counter with it) is
    /// told apart by its holder's process.
    pub(crate) fn first_held(&self, beliefs: &[Belief]) -> HashMap<(String, OwnerToken), u128> {
        let mut record = lock(&self.0);
        record.close_all();
        let pids: HashMap<OwnerToken, u64> = (record.by_lease.held.keys())
            .filter_map(|(_, (label, token))| Some((*token, pid_of(label)?)))
            .collect();
        let mut believed: HashMap<(&str, u64, u64), u128> = HashMap::new();
        for belief in beliefs {
            if let Some(fence) = belief.fence.map(store_fence) {
                let from =
                    (believed.entry((&belief.name, fence, belief.pid))).or_insert(belief.from);
                *from = (*from).min(belief.from);
            }
        }
        let mut first = HashMap::new();
        for ((name, token), fences) in &record.fences {
            let Some(&pid) = pids.get(token) else {
                continue;
            };
            let held = (fences.iter())
                .filter_map(|fence| believed.get(&(name.as_str(), *fence, pid)))
                .min();
            if let Some(&held) = held {
                first.insert((name.clone(), *token), held);
            }
        }
        first
    }

    /// Every lease the store held for a process that believed it held nothing of its lock
    /// (held by nobody) for longer than `longest(pid, (from, until))` (nanoseconds since the
    /// epoch), described; `ended`: as for [`uncovered`](Self::uncovered).
    pub(crate) fn held_by_nobody(
        &self,
        beliefs: &[Belief],
        ended: u128,
        longest: impl Fn(u64, (u128, u128)) -> std::time::Duration,
    ) -> Vec<String> {
        let mut record = lock(&self.0);
        record.close_all();
        let mut believed: BTreeMap<(&str, u64), Vec<(u128, u128)>> = BTreeMap::new();
        for belief in beliefs {
            let span = (belief.from, belief.until.unwrap_or(ended));
            believed
                .entry((&belief.name, belief.pid))
                .or_default()
                .push(span);
        }
        let mut found = Vec::new();
        for ((name, (label, _)), spans) in &record.by_lease.held {
            let Some(pid) = pid_of(label) else {
                continue;
            };
            let beliefs = believed
                .get(&(name.as_str(), pid))
                .map_or(&[][..], Vec::as_slice);
            let gaps = (spans.iter()).flat_map(|&span| gaps(beliefs, span));
            for (from, until) in gaps {
                let longest = longest(pid, (from, until)).as_nanos();
                if until - from > longest {
                    found.push(format!(
                        "the store held {name} for p{pid} from {:.3} ms to {:.3} ms, while p{pid} \
                         believed it held nothing of it: {:.3} ms, longer than its TTL, the \
                         time it was paused meanwhile and the bound ({:.3} ms)",
                        ms(from),
                        ms(until),
                        ms(until - from),
                        ms(longest)
                    ));
                }
            }
        }
        found
    }
}

/// The process a holder label (`p3`) names.
fn pid_of(label: &str) -> Option<u64> {
    label.strip_prefix('p')?.parse().ok()
}

/// The store's token in a hold's fence: the store's token × 256 plus the hold's number in its
/// run (`middleware/docs/fencing.md`).
fn store_fence(fence: u64) -> u64 {
    fence / 256
}

/// Every stretch of `span` that none of `beliefs` covers, in order.
fn gaps(beliefs: &[(u128, u128)], (start, end): (u128, u128)) -> Vec<(u128, u128)> {
    let mut beliefs = beliefs.to_vec();
    beliefs.sort_unstable();
    let (mut reached, mut gaps) = (start, Vec::new());
    for (from, until) in beliefs.into_iter().chain([(end, end)]) {
        let from = from.min(end);
        if from > reached {
            gaps.push((reached, from));
        }
        reached = reached.max(until);
    }
    gaps
}

impl Record {
    /// `name` is held by `leases` now: each lease's holder label, owner token, and when it
    /// expires.
    fn changed(
        &mut self,
        name: &str,
        leases: &[(&'static str, OwnerToken, Option<FencingToken>, Instant)],
    ) {
        for &(_, token, fence, _) in leases {
            let Some(fence) = fence.map(FencingToken::get) else {
                continue;
            };
            let fences = self.fences.entry((name.to_owned(), token)).or_default();
            if !fences.contains(&fence) {
                fences.push(fence);
            }
        }
        let by_lease = (leases.iter())
            .map(|&(label, token, _, expires)| ((label.to_owned(), token), expires))
            .collect();
        self.by_lease
            .changed(name, Instant::now(), by_lease, self.epoch);
    }

    /// Ends every open span where its lease runs out.
    fn close_all(&mut self) {
        self.by_lease.close_all(self.epoch);
    }

    /// By lock name and holder label, the spans the store held the name for it, by any of
    /// its leases (they may overlap).
    fn by_process(&self) -> HashMap<(&str, &str), Vec<(u128, u128)>> {
        let mut by_process: HashMap<(&str, &str), Vec<(u128, u128)>> = HashMap::new();
        for ((name, (label, _)), spans) in &self.by_lease.held {
            let held = by_process
                .entry((name.as_str(), label.as_str()))
                .or_default();
            held.extend_from_slice(spans);
        }
        by_process
    }
}

impl<H: Ord + Clone> Spans<H> {
    /// `name` is held `now` for each of `holders`, until when its lease runs.
    fn changed(&mut self, name: &str, now: Instant, holders: BTreeMap<H, Instant>, epoch: Instant) {
        let open = self.open.entry(name.to_owned()).or_default();
        let mut closed = Vec::new();
        open.retain(|holder, (since, until)| match holders.get(holder) {
            // Held on without a gap: its lease runs to a new end.
            Some(&expires) if *until >= now => {
                *until = expires;
                true
            }
            _ => {
                closed.push((holder.clone(), (*since, (*until).min(now))));
                false
            }
        });
        for (holder, expires) in holders {
            open.entry(holder).or_insert((now, expires));
        }
        for (holder, span) in closed {
            self.close((name.to_owned(), holder), span, epoch);
        }
    }

    fn close(&mut self, key: (String, H), (since, until): (Instant, Instant), epoch: Instant) {
        let span = ((since - epoch).as_nanos(), (until - epoch).as_nanos());
        self.held.entry(key).or_default().push(span);
    }

    /// Ends every open span where its lease runs out.
    fn close_all(&mut self, epoch: Instant) {
        for (name, open) in std::mem::take(&mut self.open) {
            for (holder, span) in open {
                self.close((name.clone(), holder), span, epoch);
            }
        }
    }
}

/// Whether `spans` cover `from` to `until` without a gap (nothing to cover: they do).
fn covers(spans: &[(u128, u128)], from: u128, until: u128) -> bool {
    if from >= until {
        return true;
    }
    let mut spans = spans.to_vec();
    spans.sort_unstable();
    let mut merged: Option<(u128, u128)> = None;
    for (start, end) in spans {
        merged = match merged {
            Some((since, covered)) if start <= covered => Some((since, covered.max(end))),
            _ => Some((start, end)),
        };
        if merged.is_some_and(|(since, covered)| since <= from && covered >= until) {
            return true;
        }
    }
    false
}

/// The spans of `spans` within a second of `belief`.
fn describe(spans: &[(u128, u128)], (from, until): (u128, u128)) -> String {
    const NEAR: u128 = 1_000_000_000;
    let near: Vec<String> = (spans.iter())
        .filter(|(start, end)| *end + NEAR >= from && *start <= until + NEAR)
        .map(|(start, end)| format!("{:.3}–{:.3} ms", ms(*start), ms(*end)))
        .collect();
    match near.is_empty() {
        true => "at no time within a second of it".to_owned(),
        false => format!("only in {} (within a second of it)", near.join(", ")),
    }
}

fn ms(nanos: u128) -> f64 {
    nanos as f64 / 1e6
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, advance};

    use super::*;

    #[test]
    fn the_gaps_are_what_no_belief_covers() {
        assert_eq!(gaps(&[], (10, 20)), [(10, 20)]);
        assert_eq!(gaps(&[(5, 12), (14, 15)], (10, 20)), [(12, 14), (15, 20)]);
        assert_eq!(gaps(&[(12, 19)], (10, 20)), [(10, 12), (19, 20)]);
        assert_eq!(gaps(&[(5, 25)], (10, 20)), []);
    }

    #[test]
    fn spans_that_meet_cover_what_lies_across_them() {
        assert!(covers(&[(0, 5), (5, 20)], 2, 18));
        assert!(covers(&[(7, 20), (0, 5)], 10, 20), "the later span alone");
        assert!(!covers(&[(0, 5), (7, 20)], 2, 18), "a gap from 5 to 7");
        assert!(!covers(&[], 2, 3));
        assert!(covers(&[], 3, 3), "nothing believed, nothing to cover");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_that_lapsed_before_it_was_taken_again_leaves_a_gap() {
        let epoch = Instant::now();
        let mut record = Record {
            epoch,
            by_lease: Spans::default(),
            fences: HashMap::new(),
        };
        let (second, token) = (Duration::from_secs(1), OwnerToken::new());
        record.changed("k", &[("p1", token, None, epoch + second)]);
        advance(second / 2).await;
        record.changed("k", &[("p1", token, None, epoch + 2 * second)]);
        advance(2 * second).await;
        record.changed("k", &[("p1", OwnerToken::new(), None, epoch + 4 * second)]);
        advance(second / 2).await;
        record.changed("k", &[]);
        record.close_all();
        assert_eq!(record.by_lease.held.len(), 2, "two leases");
        let by_process = record.by_process();
        let spans = &by_process[&("k", "p1")];
        let nanos = |secs: f64| (secs * 1e9) as u128;
        assert!(covers(spans, 0, nanos(2.0)), "renewed in time: {spans:?}");
        assert!(
            !covers(spans, nanos(1.5), nanos(2.8)),
            "lapsed at 2 s: {spans:?}"
        );
        assert!(
            covers(spans, nanos(2.5), nanos(3.0)),
            "taken again at 2.5 s"
        );
        assert!(!covers(spans, nanos(2.5), nanos(3.1)), "released at 3 s");
    }
}
